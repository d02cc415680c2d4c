/* The engine's clock for per-request stamps. A stamp is ft_clock_ticks();
 * differences convert to time with ft_clock_ticks_to_ns(). Stamps are cheap
 * so metrics on or off cannot change throughput measurably. */
#ifndef FT_CLOCK_H
#define FT_CLOCK_H

#include <stdint.h>

/* Calibrate once at start-up (idempotent, thread-safe). */
void ft_clock_init(void);
uint64_t ft_clock_ticks(void);
/* Convert a tick difference to nanoseconds / milliseconds. */
double ft_clock_ticks_to_ns(uint64_t ticks);
double ft_clock_ticks_to_ms(uint64_t ticks);
/* "tsc", "cntvct" or "clock_gettime". */
const char *ft_clock_source(void);

#endif
