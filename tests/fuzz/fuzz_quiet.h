/* The log sink every fuzz target installs: the engine's error lines for
 * refused inputs would drown libFuzzer's own output. */
#ifndef FT_FUZZ_QUIET_H
#define FT_FUZZ_QUIET_H

#include "ft/common.h"

static void fuzz_quiet_sink(enum ft_log_level level, const char *func, const char *msg, void *ud) {
    (void)level, (void)func, (void)msg, (void)ud;
}

#endif
