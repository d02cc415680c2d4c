/* The engine's clock for request stamps (docs/architecture.md, Metrics clock).
 *
 * x86-64: the TSC, read with lfence+rdtsc so a stamp is not reordered
 * before the work it closes, and used only when CPUID reports an invariant
 * TSC (constant rate across P-states and C-states); its rate is calibrated
 * once against CLOCK_MONOTONIC. ARM64: the virtual counter cntvct_el0 at
 * the frequency in cntfrq_el0, checked against CLOCK_MONOTONIC the same way
 * (firmware writes cntfrq_el0, and some boards ship a wrong value): when
 * three measurements all disagree with it by more than 1%, their median
 * replaces it. Anything else: clock_gettime.
 *
 * This file is compiled without ISA flags; rdtsc/lfence and cpuid exist on
 * every x86-64 CPU. */
#include "ft/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

enum clock_source { SRC_GETTIME, SRC_TSC, SRC_CNTVCT };

static enum clock_source g_source = SRC_GETTIME;
static double g_ns_per_tick = 1.0;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
static bool tsc_is_invariant(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return false;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1u; /* CPUID.80000007H:EDX[8] = invariant TSC */
}

static uint64_t read_tsc(void) {
    _mm_lfence();
    return __rdtsc();
}

#endif

#if defined(__aarch64__)
static uint64_t read_cntvct(void) {
    uint64_t v;
    __asm__ volatile("isb; mrs %0, cntvct_el0" : "=r"(v)::"memory");
    return v;
}
static uint64_t read_cntfrq(void) {
    uint64_t f;
    __asm__ volatile("mrs %0, cntfrq_el0" : "=r"(f));
    return f;
}
#endif

#if defined(__x86_64__) || defined(__aarch64__)
/* Ticks per ns over a ~20 ms window, each end bracketed by clock reads so
 * a preemption between the two reads cannot skew it by more than one read. */
static double calibrate(uint64_t (*read_counter)(void)) {
    uint64_t t0 = monotonic_ns(), c0 = read_counter();
    uint64_t t1, c1;
    do {
        t1 = monotonic_ns();
        c1 = read_counter();
    } while (t1 - t0 < 20000000ull);
    return c1 > c0 ? (double)(t1 - t0) / (double)(c1 - c0) : 0.0;
}
#endif

/* The ns per tick of the ARM generic timer from cntfrq_el0 and three
 * measured rates (ns per tick; 0: failed): cntfrq_el0's when one of them
 * agrees within 1% (a preemption inside a measurement only makes that one
 * wrong), else the median measurement; 0 when nothing is usable (a
 * 10 MHz..10 THz counter, as for the TSC). Firmware writes cntfrq_el0
 * (Armv8.6 fixes the counter at 1 GHz) and some boards ship a wrong value,
 * which would scale every metric. Used on aarch64; tested everywhere. */
__attribute__((unused)) static double generic_timer_ns_per_tick(uint64_t cntfrq, const double measured[3]) {
    const double nominal = cntfrq > 0 ? 1e9 / (double)cntfrq : 0.0;
    int n_ok = 0;
    double ok[3];
    for (int i = 0; i < 3; i++) {
        if (!(measured[i] > 1e-4 && measured[i] < 100.0))
            continue;
        if (fabs(measured[i] - nominal) <= 0.01 * nominal)
            return nominal;
        ok[n_ok++] = measured[i];
    }
    if (n_ok == 0)
        return nominal > 1e-4 && nominal < 100.0 ? nominal : 0.0;
    if (n_ok == 3) { /* the median */
        const double lo = fmin(ok[0], fmin(ok[1], ok[2])), hi = fmax(ok[0], fmax(ok[1], ok[2]));
        return ok[0] + ok[1] + ok[2] - lo - hi;
    }
    return ok[0];
}

static void clock_setup(void) {
#if defined(__x86_64__)
    if (tsc_is_invariant()) {
        double ns_per_tick = calibrate(read_tsc);
        if (ns_per_tick > 0.0 && ns_per_tick < 100.0) { /* a 10 MHz..10 THz counter */
            g_ns_per_tick = ns_per_tick;
            g_source = SRC_TSC;
        }
    }
#elif defined(__aarch64__)
    const uint64_t cntfrq = read_cntfrq();
    const double nominal = cntfrq > 0 ? 1e9 / (double)cntfrq : 0.0;
    double measured[3] = {0.0, 0.0, 0.0};
    for (int i = 0; i < 3; i++) { /* 20 ms when cntfrq_el0 is right */
        measured[i] = calibrate(read_cntvct);
        if (fabs(measured[i] - nominal) <= 0.01 * nominal)
            break;
    }
    double ns_per_tick = generic_timer_ns_per_tick(cntfrq, measured);
    if (ns_per_tick > 0.0) {
        g_ns_per_tick = ns_per_tick;
        g_source = SRC_CNTVCT;
    }
#endif
}

void ft_clock_init(void) { pthread_once(&g_once, clock_setup); }

uint64_t ft_clock_ticks(void) {
    switch (g_source) {
#if defined(__x86_64__)
    case SRC_TSC: return read_tsc();
#endif
#if defined(__aarch64__)
    case SRC_CNTVCT: return read_cntvct();
#endif
    default: return monotonic_ns();
    }
}

double ft_clock_ticks_to_ns(uint64_t ticks) { return (double)ticks * g_ns_per_tick; }
double ft_clock_ticks_to_ms(uint64_t ticks) { return (double)ticks * g_ns_per_tick * 1e-6; }

const char *ft_clock_source(void) {
    switch (g_source) {
    case SRC_TSC: return "tsc";
    case SRC_CNTVCT: return "cntvct";
    default: return "clock_gettime";
    }
}
