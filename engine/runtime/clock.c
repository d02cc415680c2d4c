/* The engine's clock for request stamps (docs/architecture.md, Metrics clock).
 *
 * x86-64: the TSC, read with lfence+rdtsc so a stamp is not reordered
 * before the work it closes, and used only when CPUID reports an invariant
 * TSC (constant rate across P-states and C-states); its rate is calibrated
 * once against CLOCK_MONOTONIC. ARM64: the virtual counter cntvct_el0 at
 * the frequency in cntfrq_el0. Anything else: clock_gettime.
 *
 * This file is compiled without ISA flags; rdtsc/lfence and cpuid exist on
 * every x86-64 CPU. */
#include "ft/clock.h"

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

static inline uint64_t read_tsc(void) {
    _mm_lfence();
    return __rdtsc();
}

/* Ticks per ns over a ~20 ms window, each end bracketed by clock reads so
 * a preemption between the two reads cannot skew it by more than one read. */
static double calibrate_tsc(void) {
    uint64_t t0 = monotonic_ns(), c0 = read_tsc();
    uint64_t t1, c1;
    do {
        t1 = monotonic_ns();
        c1 = read_tsc();
    } while (t1 - t0 < 20000000ull);
    return (double)(t1 - t0) / (double)(c1 - c0);
}
#endif

#if defined(__aarch64__)
static inline uint64_t read_cntvct(void) {
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

static void clock_setup(void) {
#if defined(__x86_64__)
    if (tsc_is_invariant()) {
        double ns_per_tick = calibrate_tsc();
        if (ns_per_tick > 0.0 && ns_per_tick < 100.0) { /* a 10 MHz..10 THz counter */
            g_ns_per_tick = ns_per_tick;
            g_source = SRC_TSC;
        }
    }
#elif defined(__aarch64__)
    uint64_t f = read_cntfrq();
    if (f > 0) {
        g_ns_per_tick = 1e9 / (double)f;
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
