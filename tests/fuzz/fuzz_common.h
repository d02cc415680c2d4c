/* What the fuzz targets share: the log sink every target installs (the
 * engine's error lines for refused inputs would drown libFuzzer's own
 * output), the LLVMFuzzerInitialize of a target that needs nothing else,
 * REQUIRE for a property that must hold, and the loading of a committed
 * vocabulary. */
#ifndef FT_FUZZ_COMMON_H
#define FT_FUZZ_COMMON_H

#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static void fuzz_quiet_sink(enum ft_log_level level, const char *func, const char *msg, void *ud) {
    (void)level, (void)func, (void)msg, (void)ud;
}

/* Defines LLVMFuzzerInitialize for a target whose only setup is the quiet log. */
#define FUZZ_QUIET_INITIALIZE()                         \
    int LLVMFuzzerInitialize(int *argc, char ***argv);  \
    int LLVMFuzzerInitialize(int *argc, char ***argv) { \
        (void)argc, (void)argv;                         \
        ft_log_set_sink(fuzz_quiet_sink, NULL);         \
        return 0;                                       \
    }

/* A violated property: trap, so libFuzzer keeps the input as a crash.
 * require() also says which property (libFuzzer's report names the target). */
#define REQUIRE(c)                \
    do {                          \
        if (!(c))                 \
            __builtin_trap();     \
    } while (0)

static inline void require(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "property violated: %s\n", what);
        abort();
    }
}

/* The tokenizer of vocab/FILE in FT_SHARED_DIR (default
 * FT_SHARED_DIR_DEFAULT, set by tests/CMakeLists.txt), or NULL when the file
 * is not there: the caller says what goes unchecked without it. A file that
 * is there but does not load ends the target. path (OUT: the file's path,
 * for messages) holds `cap` bytes. */
static inline struct ft_tokenizer *fuzz_load_vocab(const char *target, const char *file, char *path,
                                                   size_t cap) {
    const char *shared = getenv("FT_SHARED_DIR");
    if (!shared || !*shared)
        shared = FT_SHARED_DIR_DEFAULT;
    snprintf(path, cap, "%s/vocab/%s", shared, file);
    struct ft_gguf *g = NULL;
    if (ft_gguf_open(path, &g) != 0)
        return NULL;
    struct ft_tokenizer *tok = NULL;
    if (ft_tokenizer_load(g, &tok) != 0) {
        fprintf(stderr, "%s: %s: %s\n", target, path, ft_last_error());
        exit(1);
    }
    ft_gguf_close(g);
    return tok;
}

#endif
