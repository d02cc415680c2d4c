/* The request clock: monotonic, and within 1% of CLOCK_MONOTONIC over a
 * 200 ms interval (the ISSUE's contract). Also reports the source, which
 * must be the architecture's counter (tsc where CPUID says it is
 * invariant; cntvct_el0 on aarch64, also under qemu-aarch64:
 * tests/arm/test_ft_aarch64.py runs this test there), and checks the
 * choice of the ARM generic timer's rate (generic_timer_ns_per_tick) with
 * made-up cntfrq_el0 values and measurements, on every architecture. */
#include "ft/clock.h"
#include "ft_test.h"

#include "engine/runtime/clock.c"

#include <string.h>
#include <time.h>

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void test_generic_timer_rate(void) {
    /* cntfrq_el0 right (62.5 MHz, 16 ns): kept, even when two of the three
     * measurements were preempted */
    CHECK_NEAR(generic_timer_ns_per_tick(62500000, (double[3]){16.05, 0, 0}), 16.0, 1e-12);
    CHECK_NEAR(generic_timer_ns_per_tick(62500000, (double[3]){19.0, 30.0, 16.1}), 16.0, 1e-12);
    /* cntfrq_el0 wrong (says 24 MHz, the counter runs at 1 GHz): the median
     * measurement */
    CHECK_NEAR(generic_timer_ns_per_tick(24000000, (double[3]){1.002, 0.999, 1.3}), 1.002, 1e-12);
    /* cntfrq_el0 zero: the measurement; nothing usable: 0 (clock_gettime) */
    CHECK_NEAR(generic_timer_ns_per_tick(0, (double[3]){1.0, 1.0, 1.0}), 1.0, 1e-12);
    CHECK_NEAR(generic_timer_ns_per_tick(0, (double[3]){0, 0, 0}), 0.0, 0);
    /* no measurement (all failed): cntfrq_el0 within 10 MHz..10 THz */
    CHECK_NEAR(generic_timer_ns_per_tick(1000000000, (double[3]){0, 0, 0}), 1.0, 1e-12);
    CHECK_NEAR(generic_timer_ns_per_tick(1000, (double[3]){0, 0, 0}), 0.0, 0);
}

int main(void) {
    test_generic_timer_rate();
    ft_clock_init();
    printf("clock source: %s\n", ft_clock_source());
#if defined(__aarch64__)
    CHECKF(!strcmp(ft_clock_source(), "cntvct"), "source %s", ft_clock_source());
    uint64_t frq;
    __asm__ volatile("mrs %0, cntfrq_el0" : "=r"(frq));
    printf("cntfrq_el0: %llu Hz, %.6f ns per tick in use\n", (unsigned long long)frq, g_ns_per_tick);
#endif

    /* monotonic over many consecutive reads */
    uint64_t prev = ft_clock_ticks();
    int backwards = 0;
    for (int i = 0; i < 1000000; i++) {
        uint64_t t = ft_clock_ticks();
        backwards += t < prev;
        prev = t;
    }
    CHECK_EQ_INT(backwards, 0);

    /* rate: 200 ms of sleep measured both ways, best of 3 to ride out a
     * preemption between the paired reads */
    double best = 1e9;
    for (int k = 0; k < 3; k++) {
        uint64_t m0 = mono_ns(), c0 = ft_clock_ticks();
        struct timespec d = {0, 200000000L};
        nanosleep(&d, NULL);
        uint64_t m1 = mono_ns(), c1 = ft_clock_ticks();
        double ns = ft_clock_ticks_to_ns(c1 - c0), ref = (double)(m1 - m0);
        double rel = fabs(ns - ref) / ref;
        if (rel < best)
            best = rel;
    }
    printf("clock vs CLOCK_MONOTONIC over 200 ms: %.4f%%\n", best * 100);
    CHECKF(best < 0.01, "relative error %.4f", best);
    CHECK_NEAR(ft_clock_ticks_to_ms(1000000) * 1e6, ft_clock_ticks_to_ns(1000000), 1e-6);
    return ft_test_finish("test_clock");
}
