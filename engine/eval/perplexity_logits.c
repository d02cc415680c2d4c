/* llama.cpp's file of base log-probabilities (llama-perplexity
 * --kl-divergence-base), read and written (format in ft/perplexity.h).
 *
 * The file is hostile input: the header's counts bound everything that
 * follows, so they are range-checked and the exact file size is computed
 * from them (with overflow checks) before anything else is read; token ids
 * are checked against n_vocab at open, each row's scale and offset when the
 * row is read. Rows are read with pread (thread-safe), or copied from a
 * caller's buffer. */
#include "ft/atomic_file.h"
#include "ft/common.h"
#include "ft/perplexity.h"
#include "perplexity_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LP_MAGIC "_logits_"
#define LP_HEADER 20 /* magic, n_ctx, n_vocab, n_chunk */
#define LP_MAX_CTX (1 << 20)
#define LP_MAX_VOCAB (1 << 24)

struct ft_logprob_file {
    char *name;
    int fd;             /* -1 for a buffer */
    const uint8_t *buf; /* caller-owned, when fd < 0 */
    int32_t n_ctx, n_vocab, n_chunk, n_score;
    int32_t *tokens;
    uint64_t rows_offset; /* of the first row */
    size_t row_bytes;
};

/* Read exactly n bytes at off (the size was checked at open). */
static int lp_read_at(const struct ft_logprob_file *f, uint64_t off, void *dst, size_t n) {
    if (f->fd < 0) {
        memcpy(dst, f->buf + off, n);
        return 0;
    }
    uint8_t *p = dst;
    while (n) {
        ssize_t r = pread(f->fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            char eb[128];
            FT_LOG_E("%s: read failed at offset %llu: %s", f->name, (unsigned long long)off,
                     r < 0 ? strerror_r(errno, eb, sizeof(eb)) : "unexpected end of file");
            return FT_EIO;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Validate the header against the total size and load the tokens. */
static int lp_parse(struct ft_logprob_file *f, uint64_t size) {
    uint8_t h[LP_HEADER];
    if (size < LP_HEADER) {
        FT_LOG_E("%s: %llu bytes is too short for a log-probability file", f->name, (unsigned long long)size);
        return FT_EFORMAT;
    }
    int rc = lp_read_at(f, 0, h, sizeof(h));
    if (rc)
        return rc;
    if (memcmp(h, LP_MAGIC, 8) != 0) {
        FT_LOG_E("%s: not a log-probability file (no \"_logits_\" magic; it is written by ft perplexity "
                 "--save-logits or llama-perplexity --kl-divergence-base)",
                 f->name);
        return FT_EFORMAT;
    }
    uint32_t n_ctx;
    int32_t n_vocab, n_chunk;
    memcpy(&n_ctx, h + 8, 4);
    memcpy(&n_vocab, h + 12, 4);
    memcpy(&n_chunk, h + 16, 4);
    if (n_ctx < 4 || n_ctx > LP_MAX_CTX) {
        FT_LOG_E("%s: context length %u is out of range (4..%d)", f->name, n_ctx, LP_MAX_CTX);
        return FT_EFORMAT;
    }
    if (n_vocab < 2 || n_vocab > LP_MAX_VOCAB) {
        FT_LOG_E("%s: vocabulary size %d is out of range (2..%d)", f->name, n_vocab, LP_MAX_VOCAB);
        return FT_EFORMAT;
    }
    if (n_chunk < 1) {
        FT_LOG_E("%s: chunk count %d must be positive", f->name, n_chunk);
        return FT_EFORMAT;
    }
    f->n_ctx = (int32_t)n_ctx;
    f->n_vocab = n_vocab;
    f->n_chunk = n_chunk;
    f->n_score = f->n_ctx - 1 - f->n_ctx / 2;
    f->row_bytes = ft_logprob_row_len(n_vocab) * sizeof(uint16_t);
    size_t n_tok, tok_bytes, rows, rows_bytes, want;
    if (ft_mul_overflow((size_t)n_chunk, (size_t)n_ctx, &n_tok) || ft_mul_overflow(n_tok, 4, &tok_bytes) ||
        ft_mul_overflow((size_t)n_chunk, (size_t)f->n_score, &rows) ||
        ft_mul_overflow(rows, f->row_bytes, &rows_bytes) || ft_add_overflow(LP_HEADER, tok_bytes, &want) ||
        ft_add_overflow(want, rows_bytes, &want)) {
        FT_LOG_E("%s: header sizes overflow", f->name);
        return FT_EFORMAT;
    }
    if ((uint64_t)want != size) {
        FT_LOG_E("%s: is %llu bytes, but its header (n_ctx %d, n_vocab %d, %d chunks) says %zu: truncated or "
                 "not a log-probability file",
                 f->name, (unsigned long long)size, f->n_ctx, n_vocab, n_chunk, want);
        return FT_EFORMAT;
    }
    f->rows_offset = LP_HEADER + (uint64_t)tok_bytes;
    f->tokens = malloc(tok_bytes);
    if (!f->tokens) {
        FT_LOG_E("%s: out of memory for %zu tokens", f->name, n_tok);
        return FT_ENOMEM;
    }
    if ((rc = lp_read_at(f, LP_HEADER, f->tokens, tok_bytes)))
        return rc;
    for (size_t i = 0; i < n_tok; i++) {
        if (f->tokens[i] < 0 || f->tokens[i] >= n_vocab) {
            FT_LOG_E("%s: token #%zu is %d, outside the vocabulary (0..%d)", f->name, i, f->tokens[i], n_vocab - 1);
            return FT_EFORMAT;
        }
    }
    return 0;
}

static struct ft_logprob_file *lp_new(const char *name) {
    struct ft_logprob_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->name = strdup(name ? name : "(buffer)"))) {
        free(f);
        FT_LOG_E("out of memory");
        return NULL;
    }
    f->fd = -1;
    return f;
}

int ft_logprob_file_open(const char *path, struct ft_logprob_file **out) {
    *out = NULL;
    struct ft_logprob_file *f = lp_new(path);
    if (!f)
        return FT_ENOMEM;
    char eb[128];
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        FT_LOG_E("%s: cannot open: %s", path, strerror_r(errno, eb, sizeof(eb)));
        ft_logprob_file_close(f);
        return FT_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        FT_LOG_E("%s: not a regular file", path);
        ft_logprob_file_close(f);
        return FT_EIO;
    }
    int rc = lp_parse(f, (uint64_t)st.st_size);
    if (rc) {
        ft_logprob_file_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int ft_logprob_file_open_buffer(const void *data, size_t size, const char *name, struct ft_logprob_file **out) {
    *out = NULL;
    struct ft_logprob_file *f = lp_new(name);
    if (!f)
        return FT_ENOMEM;
    f->buf = data;
    int rc = lp_parse(f, size);
    if (rc) {
        ft_logprob_file_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void ft_logprob_file_close(struct ft_logprob_file *f) {
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->tokens);
    free(f->name);
    free(f);
}

int32_t ft_logprob_file_n_ctx(const struct ft_logprob_file *f) { return f->n_ctx; }
int32_t ft_logprob_file_n_vocab(const struct ft_logprob_file *f) { return f->n_vocab; }
int32_t ft_logprob_file_n_chunk(const struct ft_logprob_file *f) { return f->n_chunk; }
const int32_t *ft_logprob_file_tokens(const struct ft_logprob_file *f) { return f->tokens; }

int ft_logprob_file_read_raw(struct ft_logprob_file *f, int32_t chunk, int32_t k, uint16_t *row) {
    if (chunk < 0 || chunk >= f->n_chunk || k < 0 || k >= f->n_score) {
        FT_LOG_E("%s: no row %d of chunk %d", f->name, k, chunk);
        return FT_EINVAL;
    }
    uint64_t off = f->rows_offset + ((uint64_t)chunk * (uint64_t)f->n_score + (uint64_t)k) * f->row_bytes;
    int rc = lp_read_at(f, off, row, f->row_bytes);
    if (rc)
        return rc;
    float scale, min_log_prob;
    memcpy(&scale, row, 4);
    memcpy(&min_log_prob, row + 2, 4);
    float probe[1];
    uint16_t head[5] = {row[0], row[1], row[2], row[3], 0};
    if (ft_logprob_decode(head, 1, probe) != 0) {
        FT_LOG_E("%s: row %d of chunk %d has scale %g and offset %g, which no encoder writes (corrupt file)",
                 f->name, k, chunk, (double)scale, (double)min_log_prob);
        return FT_EFORMAT;
    }
    return 0;
}

int ft_logprob_file_read(struct ft_logprob_file *f, int32_t chunk, int32_t k, uint16_t *tmp, float *logp) {
    int rc = ft_logprob_file_read_raw(f, chunk, k, tmp);
    if (rc)
        return rc;
    return ft_logprob_decode(tmp, f->n_vocab, logp); /* cannot fail: the header was checked */
}

/* ---- writer ------------------------------------------------------------------ */

int ft_logprob_writer_open(struct ft_atomic_file *af, const char *path, int32_t n_ctx, int32_t n_vocab,
                           int32_t n_chunk, const int32_t *tokens) {
    int rc = ft_atomic_file_open(af, path);
    if (rc)
        return rc;
    uint32_t c = (uint32_t)n_ctx;
    ft_atomic_file_write(af, LP_MAGIC, 8);
    ft_atomic_file_write(af, &c, 4);
    ft_atomic_file_write(af, &n_vocab, 4);
    ft_atomic_file_write(af, &n_chunk, 4);
    return ft_atomic_file_write(af, tokens, sizeof(int32_t) * (size_t)n_chunk * (size_t)n_ctx);
}
