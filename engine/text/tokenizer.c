/* Tokenizer front end: builds a struct ft_tokenizer from GGUF
 * `tokenizer.ggml.*` metadata, splits text on special tokens, dispatches the
 * plain-text fragments to the SentencePiece (tokenizer_spm.c) or byte-level
 * BPE (tokenizer_bpe.c) algorithm, and turns ids back into text, one-shot or
 * streamed. The lookups and buffers the algorithms share are
 * tokenizer_common.c, so they do not call back into this file.
 *
 * The behaviour follows llama.cpp's llama-vocab.cpp, because the conformance
 * vectors in ../shared/vocab come from it:
 *   - user-defined tokens (type 4) are split out of the text even when
 *     parse_special is false; control and unknown tokens only when it is true;
 *   - SPM adds the dummy-prefix space to every text fragment that follows a
 *     special token (or starts the text) when add_space_prefix is set;
 *   - the decoded piece of a control/unknown token is "" unless special
 *     tokens are rendered; user-defined tokens always render as their text.
 * Deliberate differences: special tokens are matched leftmost-longest in one
 * pass over the text (llama.cpp scans once per special token, longest first;
 * the results differ only for overlapping special strings), a BPE vocabulary
 * without BOS/EOS keys has no BOS/EOS (llama.cpp guesses id 11), and "</s>"
 * is end-of-generation only when it is the EOS token (Gemma 3 uses it as an
 * HTML tag).
 *
 * Ownership: the tokenizer copies everything it needs out of the reader, is
 * immutable after loading, and may be shared by threads.
 */
#include "tokenizer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FT_TOK_MAX_VOCAB (1 << 28)
#define FT_TOK_MAX_TOKEN_LEN 65535u
#define FT_TOKENIZE_MAX_BYTES ((size_t)1 << 30)

static uint32_t table_size_for(size_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    return cap;
}

/* ---- loading ------------------------------------------------------------------ */

static const char *gguf_name(const struct ft_gguf *g) {
    const char *p = ft_gguf_path(g);
    return p ? p : "gguf";
}

/* Optional bool key: absent keeps *v; wrong type is a format error. */
static int key_bool(const struct ft_gguf *g, const char *key, bool *v) {
    int rc = ft_gguf_get_bool(g, key, v);
    return rc == FT_ENOENT ? 0 : rc;
}

/* Optional token-id key of any integer type. Absent keeps *id; a value
 * outside the vocabulary is ignored with a warning (as llama.cpp does). */
static int key_token_id(const struct ft_tokenizer *t, const struct ft_gguf *g, const char *key, int32_t *id) {
    int64_t i = ft_gguf_find_key(g, key);
    if (i < 0)
        return 0;
    enum ft_gguf_vtype ty = ft_gguf_kv_type(g, i);
    size_t size = 0;
    const uint8_t *raw = ft_gguf_kv_raw(g, i, &size);
    int64_t v;
    switch (ty) {
    case FT_GGUF_UINT8: v = raw[0]; break;
    case FT_GGUF_INT8: v = (int8_t)raw[0]; break;
    case FT_GGUF_UINT16: { uint16_t x; memcpy(&x, raw, 2); v = x; break; }
    case FT_GGUF_INT16: { int16_t x; memcpy(&x, raw, 2); v = x; break; }
    case FT_GGUF_UINT32: { uint32_t x; memcpy(&x, raw, 4); v = x; break; }
    case FT_GGUF_INT32: { int32_t x; memcpy(&x, raw, 4); v = x; break; }
    case FT_GGUF_UINT64: { uint64_t x; memcpy(&x, raw, 8); v = x > INT64_MAX ? -1 : (int64_t)x; break; }
    case FT_GGUF_INT64: memcpy(&v, raw, 8); break;
    default:
        FT_LOG_E("%s: key '%s': expected an integer token id, got %s", gguf_name(g), key, ft_gguf_vtype_name(ty));
        return FT_EFORMAT;
    }
    if (v < 0 || v >= t->n_vocab) {
        FT_LOG_W("%s: key '%s' = %lld is outside the vocabulary (%d tokens); ignored", gguf_name(g), key,
                 (long long)v, t->n_vocab);
        return 0;
    }
    *id = (int32_t)v;
    return 0;
}

static bool str_eq(struct ft_str s, const char *z) {
    size_t n = strlen(z);
    return s.len == n && !memcmp(s.s, z, n);
}

static bool str_contains_ci(struct ft_str s, const char *z) {
    size_t n = strlen(z);
    for (size_t i = 0; i + n <= s.len; i++) {
        size_t k = 0;
        while (k < n && ((s.s[i + k] | 0x20) == (z[k] | 0x20)))
            k++;
        if (k == n)
            return true;
    }
    return false;
}

static uint8_t attr_from_type(int32_t type) {
    switch (type) {
    case 1: return FT_ATTR_NORMAL;
    case 2: return FT_ATTR_UNKNOWN;
    case 3: return FT_ATTR_CONTROL;
    case 4: return FT_ATTR_USER_DEFINED;
    case 5: return FT_ATTR_UNUSED;
    case 6: return FT_ATTR_BYTE;
    default: return 0; /* undefined: decodes to nothing, never produced */
    }
}

/* "<0xHH>" -> byte value, or -1. */
static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int parse_byte_token(struct ft_str s) {
    if (s.len != 6 || memcmp(s.s, "<0x", 3) || s.s[5] != '>')
        return -1;
    int h = hex_digit(s.s[3]), l = hex_digit(s.s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static int load_vocab(struct ft_tokenizer *t, const struct ft_gguf *g) {
    const char *name = gguf_name(g);
    const struct ft_str *toks;
    uint64_t n;
    int rc = ft_gguf_get_arr_str(g, "tokenizer.ggml.tokens", &toks, &n);
    if (rc == FT_ENOENT)
        FT_LOG_E("%s: no tokenizer.ggml.tokens (the file has no vocabulary)", name);
    if (rc)
        return rc == FT_ENOENT ? FT_EFORMAT : rc;
    if (n == 0 || n > FT_TOK_MAX_VOCAB) {
        FT_LOG_E("%s: tokenizer.ggml.tokens has %llu entries (allowed 1..%d)", name, (unsigned long long)n,
                 FT_TOK_MAX_VOCAB);
        return FT_EFORMAT;
    }
    t->n_vocab = (int32_t)n;

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (toks[i].len > FT_TOK_MAX_TOKEN_LEN) {
            FT_LOG_E("%s: token %llu is %zu bytes long (limit %u)", name, (unsigned long long)i, toks[i].len,
                     FT_TOK_MAX_TOKEN_LEN);
            return FT_EFORMAT;
        }
        total += toks[i].len;
        if (total > UINT32_MAX - 1) {
            FT_LOG_E("%s: tokenizer.ggml.tokens holds more than 4 GiB of text", name);
            return FT_EFORMAT;
        }
    }
    t->text = malloc(total + 1);
    t->text_off = malloc((n + 1) * sizeof(*t->text_off));
    t->score = calloc(n, sizeof(*t->score));
    t->attr = malloc(n);
    if (!t->text || !t->text_off || !t->score || !t->attr) {
        FT_LOG_E("out of memory for a vocabulary of %llu tokens", (unsigned long long)n);
        return FT_ENOMEM;
    }
    uint32_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        t->text_off[i] = off;
        if (toks[i].len)
            memcpy(t->text + off, toks[i].s, toks[i].len);
        off += (uint32_t)toks[i].len;
        if (toks[i].len > t->max_token_len)
            t->max_token_len = (uint32_t)toks[i].len;
    }
    t->text_off[n] = off;
    t->text[off] = '\0';

    /* scores: optional, float32 or int32 */
    enum ft_gguf_vtype ty;
    const void *data;
    uint64_t na;
    rc = ft_gguf_get_arr(g, "tokenizer.ggml.scores", &ty, &data, &na);
    if (rc && rc != FT_ENOENT)
        return rc;
    if (!rc) {
        if ((ty != FT_GGUF_FLOAT32 && ty != FT_GGUF_INT32) || na < n) {
            FT_LOG_E("%s: tokenizer.ggml.scores must be %llu float32 or int32 values (got %llu of %s)", name,
                     (unsigned long long)n, (unsigned long long)na, ft_gguf_vtype_name(ty));
            return FT_EFORMAT;
        }
        for (uint64_t i = 0; i < n; i++) {
            float s = ty == FT_GGUF_FLOAT32 ? ((const float *)data)[i] : (float)((const int32_t *)data)[i];
            t->score[i] = isnan(s) ? -INFINITY : s; /* NaN would break the heap order */
        }
    }

    /* token types: optional int32 */
    rc = ft_gguf_get_arr(g, "tokenizer.ggml.token_type", &ty, &data, &na);
    if (rc && rc != FT_ENOENT)
        return rc;
    if (!rc && (ty != FT_GGUF_INT32 || na < n)) {
        FT_LOG_E("%s: tokenizer.ggml.token_type must be %llu int32 values (got %llu of %s)", name,
                 (unsigned long long)n, (unsigned long long)na, ft_gguf_vtype_name(ty));
        return FT_EFORMAT;
    }
    size_t n_bad_byte = 0;
    for (uint64_t i = 0; i < n; i++) {
        t->attr[i] = rc ? FT_ATTR_NORMAL : attr_from_type(((const int32_t *)data)[i]);
        if ((t->attr[i] & FT_ATTR_BYTE) && parse_byte_token(ft_tok_text(t, (int32_t)i)) < 0) {
            t->attr[i] = FT_ATTR_NORMAL; /* decode it as text rather than as a garbage byte */
            n_bad_byte++;
        }
    }
    if (n_bad_byte)
        FT_LOG_W("%s: %zu byte-type tokens are not of the form <0xHH>; treated as normal", name, n_bad_byte);
    return 0;
}

static int build_vocab_hash(struct ft_tokenizer *t, const char *name) {
    uint32_t cap = table_size_for((size_t)t->n_vocab);
    t->vhash = calloc(cap, sizeof(*t->vhash));
    if (!t->vhash) {
        FT_LOG_E("out of memory for the vocabulary hash (%u slots)", cap);
        return FT_ENOMEM;
    }
    t->vhash_mask = cap - 1;
    size_t n_dup = 0, n_empty = 0;
    int32_t first_dup = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        struct ft_str s = ft_tok_text(t, id);
        if (s.len == 0) {
            n_empty++;
            continue;
        }
        uint32_t i = (uint32_t)ft_tok_hash(s.s, s.len) & t->vhash_mask;
        bool dup = false;
        while (t->vhash[i]) {
            struct ft_str o = ft_tok_text(t, (int32_t)t->vhash[i] - 1);
            if (o.len == s.len && !memcmp(o.s, s.s, s.len)) {
                dup = true;
                break;
            }
            i = (i + 1) & t->vhash_mask;
        }
        if (dup) { /* keep the first id for this text */
            if (first_dup < 0)
                first_dup = id;
            n_dup++;
            continue;
        }
        t->vhash[i] = (uint32_t)id + 1;
    }
    if (n_dup)
        FT_LOG_W("%s: %zu duplicate token strings (first: id %d); the lowest id wins", name, n_dup, first_dup);
    if (n_empty)
        FT_LOG_W("%s: %zu empty token strings; they can be decoded but never produced", name, n_empty);
    return 0;
}

static int load_merges(struct ft_tokenizer *t, const struct ft_gguf *g) {
    const char *name = gguf_name(g);
    const struct ft_str *m;
    uint64_t n;
    int rc = ft_gguf_get_arr_str(g, "tokenizer.ggml.merges", &m, &n);
    if (rc == FT_ENOENT) {
        FT_LOG_E("%s: BPE vocabulary without tokenizer.ggml.merges", name);
        return FT_EFORMAT;
    }
    if (rc)
        return rc;
    if (n > FT_TOK_MAX_VOCAB) {
        FT_LOG_E("%s: tokenizer.ggml.merges has %llu entries (limit %d)", name, (unsigned long long)n,
                 FT_TOK_MAX_VOCAB);
        return FT_EFORMAT;
    }
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        total += m[i].len;
        if (total > UINT32_MAX - 1) {
            FT_LOG_E("%s: tokenizer.ggml.merges holds more than 4 GiB of text", name);
            return FT_EFORMAT;
        }
    }
    t->merge_text = malloc(total + 1);
    t->merges = calloc(n ? n : 1, sizeof(*t->merges));
    uint32_t cap = table_size_for((size_t)n);
    t->mhash = calloc(cap, sizeof(*t->mhash));
    if (!t->merge_text || !t->merges || !t->mhash) {
        FT_LOG_E("out of memory for %llu merges", (unsigned long long)n);
        return FT_ENOMEM;
    }
    t->mhash_mask = cap - 1;
    t->n_merges = (uint32_t)n;

    /* "left right": split at the first space after the first byte (as
     * llama.cpp), so a left part may itself start with a space. */
    size_t n_bad = 0, n_dup = 0;
    int64_t first_bad = -1;
    uint32_t off = 0;
    for (uint64_t r = 0; r < n; r++) {
        const char *s = m[r].s;
        size_t len = m[r].len;
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        size_t ll = sp ? (size_t)(sp - s) : 0;
        size_t rl = sp ? len - ll - 1 : 0;
        if (!sp || rl == 0 || ll > FT_TOK_MAX_TOKEN_LEN || rl > FT_TOK_MAX_TOKEN_LEN) {
            if (first_bad < 0)
                first_bad = (int64_t)r;
            n_bad++;
            continue; /* the rank stays reserved; this merge can never apply */
        }
        struct ft_tok_merge *e = &t->merges[r];
        e->off = off;
        e->left_len = (uint16_t)ll;
        e->right_len = (uint16_t)rl;
        memcpy(t->merge_text + off, s, ll);
        memcpy(t->merge_text + off + ll, sp + 1, rl);
        off += (uint32_t)(ll + rl);
        if (ll + rl > t->max_merge_len)
            t->max_merge_len = (uint32_t)(ll + rl);

        const char *key = t->merge_text + e->off;
        uint32_t i = (uint32_t)ft_tok_merge_hash(key, ll + rl, ll) & t->mhash_mask;
        bool dup = false;
        while (t->mhash[i]) {
            const struct ft_tok_merge *o = &t->merges[t->mhash[i] - 1];
            if (o->left_len == ll && o->right_len == rl && !memcmp(t->merge_text + o->off, key, ll + rl)) {
                dup = true;
                break;
            }
            i = (i + 1) & t->mhash_mask;
        }
        if (dup) { /* the lower rank wins */
            n_dup++;
            continue;
        }
        t->mhash[i] = (uint32_t)r + 1;
    }
    if (n_bad)
        FT_LOG_W("%s: %zu merges are not of the form \"left right\" (first: #%lld); ignored", name, n_bad,
                 (long long)first_bad);
    if (n_dup)
        FT_LOG_W("%s: %zu duplicate merges; the lowest rank wins", name, n_dup);
    return 0;
}

static int trie_new_node(struct ft_tokenizer *t, int32_t *cap, uint8_t byte) {
    if (t->n_trie == *cap) {
        int32_t nc = *cap ? *cap * 2 : 256;
        struct ft_trie_node *nn = realloc(t->trie, (size_t)nc * sizeof(*nn));
        if (!nn)
            return -1;
        t->trie = nn;
        *cap = nc;
    }
    struct ft_trie_node *nd = &t->trie[t->n_trie];
    nd->child = -1;
    nd->sibling = -1;
    nd->token = -1;
    nd->byte = byte;
    return t->n_trie++;
}

/* The trie of special-token strings (control, user-defined, unknown). Only
 * valid UTF-8 strings go in, so a match can never split a character. */
static int build_special_trie(struct ft_tokenizer *t) {
    int32_t cap = 0;
    for (int i = 0; i < 256; i++)
        t->trie_root[i] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!(t->attr[id] & FT_ATTR_SPECIAL))
            continue;
        struct ft_str s = ft_tok_text(t, id);
        if (s.len == 0 || !ft_utf8_valid(s.s, s.len))
            continue;
        int32_t node = -1; /* parent; -1: the root table (indices, not pointers: the array moves) */
        for (size_t k = 0; k < s.len; k++) {
            uint8_t b = (uint8_t)s.s[k];
            int32_t c = node < 0 ? t->trie_root[b] : t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != b)
                c = t->trie[c].sibling;
            if (c < 0) {
                c = trie_new_node(t, &cap, b);
                if (c < 0) {
                    FT_LOG_E("out of memory for the special-token trie");
                    return FT_ENOMEM;
                }
                int32_t *link = node < 0 ? &t->trie_root[b] : &t->trie[node].child;
                t->trie[c].sibling = *link;
                *link = c;
            }
            node = c;
        }
        if (t->trie[node].token < 0) /* duplicates: the first id wins */
            t->trie[node].token = id;
    }
    return 0;
}

/* Decoded pieces with special tokens rendered; ft_token_to_piece hides
 * control/unknown ones when asked to. A piece is never longer than the raw
 * text, so the buffer has the size of t->text. */
static int build_pieces(struct ft_tokenizer *t) {
    size_t total = t->text_off[t->n_vocab];
    t->piece = malloc(total + 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof(*t->piece_off));
    if (!t->piece || !t->piece_off) {
        FT_LOG_E("out of memory for the token pieces");
        return FT_ENOMEM;
    }
    uint32_t off = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        struct ft_str s = ft_tok_text(t, id);
        uint8_t a = t->attr[id];
        char *dst = t->piece + off;
        size_t n = 0;
        t->piece_off[id] = off;
        if (a & FT_ATTR_SPECIAL) {
            memcpy(dst, s.s, s.len);
            n = s.len;
        } else if (a & FT_ATTR_NORMAL) {
            if (t->kind == FT_TOK_SPM) { /* U+2581 ▁ -> space */
                for (size_t i = 0; i < s.len;) {
                    if (i + 3 <= s.len && !memcmp(s.s + i, "\xE2\x96\x81", 3)) {
                        dst[n++] = ' ';
                        i += 3;
                    } else {
                        dst[n++] = s.s[i++];
                    }
                }
            } else { /* byte-level alphabet -> bytes */
                for (size_t i = 0; i < s.len;) {
                    uint32_t cp;
                    int k = ft_utf8_decode(s.s + i, s.len - i, &cp);
                    int b = k > 0 ? ft_bpe_cp_to_byte(cp) : -1;
                    if (b >= 0) {
                        dst[n++] = (char)b;
                        i += (size_t)k;
                    } else { /* not in the alphabet: keep the text as is */
                        size_t m = k > 0 ? (size_t)k : 1;
                        memcpy(dst + n, s.s + i, m);
                        n += m;
                        i += m;
                    }
                }
            }
        } else if (a & FT_ATTR_BYTE) {
            dst[n++] = (char)parse_byte_token(s);
        }
        off += (uint32_t)n;
        if (n > t->max_piece_len)
            t->max_piece_len = (uint32_t)n;
    }
    t->piece_off[t->n_vocab] = off;
    return 0;
}

static int eog_add(struct ft_tokenizer *t, size_t *cap, int32_t id) {
    if (id < 0)
        return 0;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 0;
    if (t->n_eog == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        int32_t *ne = realloc(t->eog, nc * sizeof(*ne));
        if (!ne) {
            FT_LOG_E("out of memory");
            return FT_ENOMEM;
        }
        t->eog = ne;
        *cap = nc;
    }
    t->eog[t->n_eog++] = id;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The id of the end-of-generation token with this text, or -1. */
static int32_t eog_find(const struct ft_tokenizer *t, const char *text) {
    const int32_t id = ft_tok_lookup(t, text, strlen(text));
    for (size_t i = 0; id >= 0 && i < t->n_eog; i++)
        if (t->eog[i] == id)
            return id;
    return -1;
}

static void eog_remove(struct ft_tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) {
            t->eog[i] = t->eog[--t->n_eog];
            return;
        }
}

/* A token llama.cpp recognizes by its text (below) becomes a control token
 * when the file did not say so: it is then parsed only as a special and
 * never printed. */
static int32_t make_control(struct ft_tokenizer *t, const char *text) {
    const int32_t id = ft_tok_lookup(t, text, strlen(text));
    if (id >= 0)
        t->attr[id] |= FT_ATTR_CONTROL;
    return id;
}

/* One role (end of turn, fill-in-the-middle prefix, ...): its id from the
 * file's key, else the first token whose text is one of the role's names,
 * made control (llama.cpp's load-time detection). -1: none. */
static int role_token(struct ft_tokenizer *t, const struct ft_gguf *g, const char *key, const char *const *texts,
                      size_t n_texts, int32_t *id) {
    *id = -1;
    int rc = key_token_id(t, g, key, id);
    if (rc || *id >= 0)
        return rc;
    for (size_t k = 0; k < n_texts && *id < 0; k++)
        *id = make_control(t, texts[k]);
    return 0;
}

#define FULLWIDTH_BAR "\xEF\xBD\x9C" /* ｜ */
#define LOWER_BLOCK "\xE2\x96\x81"   /* ▁ */

/* End-of-generation set, as llama.cpp (80fb11a, src/llama-vocab.cpp) builds
 * special_eog_ids: the EOS id; the EOT, EOM and fill-in-the-middle roles
 * (from the file's keys, else found by text); every token whose text is a
 * known end marker. Tokens found by text become control tokens. gpt-oss's
 * message-structure tokens become plain user-defined tokens (always
 * rendered), as llama.cpp makes them. */
static int build_eog(struct ft_tokenizer *t, const struct ft_gguf *g) {
    static const char *const eot[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                      "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                      "<" FULLWIDTH_BAR "end" LOWER_BLOCK "of" LOWER_BLOCK "sentence" FULLWIDTH_BAR ">",
                                      "<end_of_utterance>"};
    static const char *const eom[] = {"<|eom_id|>"};
    static const char *const fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                          "<" FULLWIDTH_BAR "fim" LOWER_BLOCK "begin" FULLWIDTH_BAR ">",
                                          "<PRE>", LOWER_BLOCK "<PRE>", "<|code_prefix|>", "<|prefix|>"};
    static const char *const fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                          "<" FULLWIDTH_BAR "fim" LOWER_BLOCK "hole" FULLWIDTH_BAR ">",
                                          "<SUF>", LOWER_BLOCK "<SUF>", "<|code_suffix|>", "<|suffix|>"};
    static const char *const fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                          "<" FULLWIDTH_BAR "fim" LOWER_BLOCK "end" FULLWIDTH_BAR ">",
                                          "<MID>", LOWER_BLOCK "<MID>", "<|code_middle|>", "<|middle|>"};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
    static const char *const fim_sep[] = {"<|file_sep|>"};
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<" FULLWIDTH_BAR "end" LOWER_BLOCK "of" LOWER_BLOCK "sentence" FULLWIDTH_BAR ">", "[e~[",
    };
    static const char *const gpt_oss_plain[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    struct role {
        const char *key;
        const char *const *texts;
        size_t n;
        bool eog;
    } roles[] = {
        {"tokenizer.ggml.eot_token_id", eot, FT_ARRAY_LEN(eot), false},
        {"tokenizer.ggml.eom_token_id", eom, FT_ARRAY_LEN(eom), false},
        {"tokenizer.ggml.fim_pre_token_id", fim_pre, FT_ARRAY_LEN(fim_pre), false},
        {"tokenizer.ggml.fim_suf_token_id", fim_suf, FT_ARRAY_LEN(fim_suf), false},
        {"tokenizer.ggml.fim_mid_token_id", fim_mid, FT_ARRAY_LEN(fim_mid), false},
        {"tokenizer.ggml.fim_pad_token_id", fim_pad, FT_ARRAY_LEN(fim_pad), true},
        {"tokenizer.ggml.fim_rep_token_id", fim_rep, FT_ARRAY_LEN(fim_rep), true},
        {"tokenizer.ggml.fim_sep_token_id", fim_sep, FT_ARRAY_LEN(fim_sep), true},
    };
    size_t cap = 0;
    int rc;
    if ((rc = eog_add(t, &cap, t->eos)))
        return rc;
    for (size_t r = 0; r < FT_ARRAY_LEN(roles); r++) {
        int32_t id;
        if ((rc = role_token(t, g, roles[r].key, roles[r].texts, roles[r].n, &id)))
            return rc;
        if (r == 0)
            t->eot = id;
        else if (r == 1)
            t->eom = id;
        /* The EOT and EOM ids end generation through their texts below, or
         * when the file names them. */
        if ((roles[r].eog || r < 2) && (rc = eog_add(t, &cap, id)))
            return rc;
    }
    for (size_t k = 0; k < FT_ARRAY_LEN(eog_texts); k++)
        if ((rc = eog_add(t, &cap, make_control(t, eog_texts[k]))))
            return rc;
    /* llama.cpp's two exceptions: beside <|return|> and <|call|> (gpt-oss)
     * or <|calls|> and <|flush|> (solar-open), <|end|> ends a message, not
     * the generation, and is a user-defined token; beside <|tool_response>
     * (gemma4), </s> is a normal token. */
    const int32_t end = eog_find(t, "<|end|>");
    const bool has_call = eog_find(t, "<|call|>") >= 0 || eog_find(t, "<|calls|>") >= 0;
    if (end >= 0 && has_call && (eog_find(t, "<|return|>") >= 0 || eog_find(t, "<|flush|>") >= 0)) {
        eog_remove(t, end);
        t->attr[end] = FT_ATTR_USER_DEFINED;
    }
    const int32_t eos_text = eog_find(t, "</s>");
    if (eos_text >= 0 && eog_find(t, "<|tool_response>") >= 0) {
        eog_remove(t, eos_text);
        t->attr[eos_text] = FT_ATTR_NORMAL;
    }
    for (size_t k = 0; k < FT_ARRAY_LEN(gpt_oss_plain); k++) {
        const int32_t id = ft_tok_lookup(t, gpt_oss_plain[k], strlen(gpt_oss_plain[k]));
        if (id >= 0)
            t->attr[id] = FT_ATTR_USER_DEFINED;
    }
    if (t->n_eog)
        qsort(t->eog, t->n_eog, sizeof(*t->eog), cmp_i32);
    return 0;
}

int ft_tokenizer_load(const struct ft_gguf *g, struct ft_tokenizer **out) {
    if (!g || !out) {
        FT_LOG_E("invalid argument (g %p, out %p)", (const void *)g, (void *)out);
        return FT_EINVAL;
    }
    *out = NULL;
    const char *name = gguf_name(g);
    struct ft_str model, pre = {NULL, 0};
    int rc = ft_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (rc == FT_ENOENT) {
        FT_LOG_E("%s: no tokenizer.ggml.model (the file has no tokenizer)", name);
        return FT_EFORMAT;
    }
    if (rc)
        return rc;
    rc = ft_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (rc && rc != FT_ENOENT)
        return rc;

    struct ft_tokenizer *t = calloc(1, sizeof(*t));
    if (!t) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    t->bos = t->eos = t->unk = t->eot = t->eom = t->pad = -1;

    if (str_eq(model, "llama")) {
        t->kind = FT_TOK_SPM;
        t->pre = FT_PRE_NONE;
        t->add_bos = true;
        t->add_space_prefix = true;
    } else if (str_eq(model, "gpt2")) {
        t->kind = FT_TOK_BPE;
        if (pre.len == 0) {
            FT_LOG_W("%s: no tokenizer.ggml.pre; using the 'default' pre-tokenizer (quality may suffer)", name);
            t->pre = FT_PRE_DEFAULT;
        } else if (!ft_bpe_pre_from_name(pre.s, pre.len, &t->pre, &t->ignore_merges, &t->add_bos)) {
            FT_LOG_E("%s: unsupported pre-tokenizer tokenizer.ggml.pre = '%.*s'", name,
                     (int)FT_MIN(pre.len, 64), pre.s);
            rc = FT_EUNSUPPORTED;
            goto fail;
        }
    } else {
        FT_LOG_E("%s: unsupported tokenizer model tokenizer.ggml.model = '%.*s' (supported: llama, gpt2)", name,
                 (int)FT_MIN(model.len, 64), model.s);
        rc = FT_EUNSUPPORTED;
        goto fail;
    }

    if ((rc = load_vocab(t, g)) || (rc = build_vocab_hash(t, name)))
        goto fail;
    if (t->kind == FT_TOK_BPE && (rc = load_merges(t, g)))
        goto fail;

    /* special ids: SPM defaults as llama.cpp (<unk> 0, <s> 1, </s> 2) */
    if (t->kind == FT_TOK_SPM) {
        t->unk = t->n_vocab > 0 ? 0 : -1;
        t->bos = t->n_vocab > 1 ? 1 : -1;
        t->eos = t->n_vocab > 2 ? 2 : -1;
    }
    if ((rc = key_token_id(t, g, "tokenizer.ggml.bos_token_id", &t->bos)) ||
        (rc = key_token_id(t, g, "tokenizer.ggml.eos_token_id", &t->eos)) ||
        (rc = key_token_id(t, g, "tokenizer.ggml.unknown_token_id", &t->unk)) ||
        (rc = key_token_id(t, g, "tokenizer.ggml.padding_token_id", &t->pad)))
        goto fail;
    if ((rc = key_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) ||
        (rc = key_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) ||
        (rc = key_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix)))
        goto fail;
    if (t->kind == FT_TOK_BPE)
        t->add_space_prefix = false; /* llama.cpp: BPE never adds the dummy prefix */
    if (t->add_bos && t->bos < 0) {
        FT_LOG_W("%s: add_bos_token is set but there is no BOS token; not adding it", name);
        t->add_bos = false;
    }
    if (t->add_eos && t->eos < 0) {
        FT_LOG_W("%s: add_eos_token is set but there is no EOS token; not adding it", name);
        t->add_eos = false;
    }

    /* byte fallback / byte symbols */
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id;
        if (t->kind == FT_TOK_SPM) {
            snprintf(buf, sizeof(buf), "<0x%02X>", b);
            id = ft_tok_lookup(t, buf, 6);
            if (id < 0 && b < 0x80) {
                buf[0] = (char)b;
                id = ft_tok_lookup(t, buf, 1);
            }
        } else {
            int n = ft_utf8_encode(ft_bpe_byte_to_cp((uint8_t)b), buf);
            id = ft_tok_lookup(t, buf, (size_t)n);
        }
        t->byte_to_id[b] = id;
    }

    if ((rc = build_eog(t, g)))
        goto fail;

    /* Phi-3 (llama.cpp keys this on general.name): special tokens eat the
     * whitespace that follows them, except <unk>, <s> and <|endoftext|>. */
    struct ft_str gname;
    if (!ft_gguf_get_str(g, "general.name", &gname) &&
        (str_contains_ci(gname, "phi-3") || str_contains_ci(gname, "phi3"))) {
        for (int32_t id = 0; id < t->n_vocab; id++) {
            struct ft_str s = ft_tok_text(t, id);
            if ((t->attr[id] & FT_ATTR_SPECIAL) || str_eq(s, "</s>"))
                t->attr[id] |= FT_ATTR_RSTRIP;
            if (str_eq(s, "<unk>") || str_eq(s, "<s>") || str_eq(s, "<|endoftext|>"))
                t->attr[id] &= (uint8_t)~FT_ATTR_RSTRIP;
        }
    }

    if ((rc = build_special_trie(t)) || (rc = build_pieces(t)))
        goto fail;
    *out = t;
    return 0;

fail:
    ft_tokenizer_free(t);
    return rc;
}

void ft_tokenizer_free(struct ft_tokenizer *t) {
    if (!t)
        return;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->score);
    free(t->attr);
    free(t->vhash);
    free(t->merge_text);
    free(t->merges);
    free(t->mhash);
    free(t->trie);
    free(t->eog);
    free(t);
}

/* ---- accessors ---------------------------------------------------------------- */

int32_t ft_tokenizer_n_vocab(const struct ft_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t ft_tokenizer_bos(const struct ft_tokenizer *t) { return t ? t->bos : -1; }
int32_t ft_tokenizer_eos(const struct ft_tokenizer *t) { return t ? t->eos : -1; }
bool ft_tokenizer_add_bos(const struct ft_tokenizer *t) { return t && t->add_bos; }
bool ft_tokenizer_add_eos(const struct ft_tokenizer *t) { return t && t->add_eos; }

bool ft_tokenizer_is_eog(const struct ft_tokenizer *t, int32_t id) {
    if (!t || id < 0)
        return false;
    size_t lo = 0, hi = t->n_eog;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->eog[mid] == id)
            return true;
        if (t->eog[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

size_t ft_tokenizer_eog_ids(const struct ft_tokenizer *t, const int32_t **ids) {
    if (ids)
        *ids = t ? t->eog : NULL;
    return t ? t->n_eog : 0;
}

bool ft_tokenizer_is_control(const struct ft_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && (t->attr[id] & (FT_ATTR_CONTROL | FT_ATTR_UNKNOWN));
}

int32_t ft_tokenizer_find(const struct ft_tokenizer *t, const char *piece, size_t len) {
    if (!t || !piece)
        return -1;
    return ft_tok_lookup(t, piece, len);
}

struct ft_str ft_tokenizer_piece_raw(const struct ft_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) {
        struct ft_str e = {"", 0};
        return e;
    }
    return ft_tok_text(t, id);
}

size_t ft_tokenizer_max_piece_len(const struct ft_tokenizer *t) { return t ? t->max_piece_len : 0; }

/* ---- tokenize ------------------------------------------------------------------- */

static bool is_space_byte(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Longest special token starting at text[i] and ending by text[limit] with
 * an attribute in `accept` and none in `reject`; returns its id (length in
 * *mlen) or -1. */
static int32_t match_special(const struct ft_tokenizer *t, const char *text, size_t limit, size_t i, uint8_t accept,
                             uint8_t reject, size_t *mlen) {
    int32_t node = t->trie_root[(uint8_t)text[i]];
    int32_t best = -1;
    size_t j = i;
    while (node >= 0) {
        int32_t tok = t->trie[node].token;
        if (tok >= 0 && (t->attr[tok] & accept) && !(t->attr[tok] & reject)) {
            best = tok;
            *mlen = j + 1 - i;
        }
        if (++j >= limit)
            break;
        uint8_t b = (uint8_t)text[j];
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != b)
            c = t->trie[c].sibling;
        node = c;
    }
    return best;
}

static int tokenize_fragment(const struct ft_tokenizer *t, const char *s, size_t n, bool after_special,
                             struct ft_tokvec *tv) {
    if (t->kind == FT_TOK_SPM)
        return ft_spm_tokenize(t, s, n, t->add_space_prefix && after_special, tv);
    return ft_bpe_tokenize(t, s, n, tv);
}

/* ft_tokenize(), with special-token parsing on outside the spans `plain`
 * (sorted, disjoint) when parse_special, and off inside them: a special
 * token is matched only when it lies wholly in one kind of region, and the
 * text around it is split exactly as without spans. */
static int tokenize_regions(const struct ft_tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, const struct ft_text_span *plain, size_t n_plain, int32_t **out,
                            size_t *n_out) {
    if (!t || (!text && len) || !out || !n_out) {
        FT_LOG_E("invalid argument (t %p, text %p, out %p, n_out %p)", (const void *)t, (const void *)text,
                 (void *)out, (void *)n_out);
        return FT_EINVAL;
    }
    *out = NULL;
    *n_out = 0;
    if (len > FT_TOKENIZE_MAX_BYTES) {
        FT_LOG_E("text of %zu bytes is longer than the %zu-byte limit", len, FT_TOKENIZE_MAX_BYTES);
        return FT_ERANGE;
    }
    size_t bad = ft_utf8_invalid_at(text, len);
    if (bad != len) {
        FT_LOG_E("text is not valid UTF-8: byte 0x%02X at offset %zu", (uint8_t)text[bad], bad);
        return FT_EINVAL;
    }

    struct ft_tokvec tv = {NULL, 0, 0};
    int rc = 0;
    if (add_special && t->add_bos && (rc = ft_tokvec_push(&tv, t->bos)))
        goto fail;

    /* Plain text matches user-defined tokens only, never one that is also
     * control (as llama.cpp's overrides make some). */
    const uint8_t accept_plain = FT_ATTR_USER_DEFINED, reject_plain = FT_ATTR_CONTROL | FT_ATTR_UNKNOWN;
    const uint8_t accept_default = parse_special ? FT_ATTR_SPECIAL : accept_plain;
    const uint8_t reject_default = parse_special ? 0 : reject_plain;
    bool after_special = true; /* SPM: the text start counts as "after a special token" */
    size_t frag = 0, i = 0, span = 0;
    while (i < len) {
        while (span < n_plain && plain[span].end <= i)
            span++;
        const bool in_plain = span < n_plain && plain[span].start <= i;
        /* A match may not run into the next region. */
        const size_t limit = in_plain ? plain[span].end : span < n_plain ? plain[span].start : len;
        size_t mlen = 0;
        int32_t id = t->trie_root[(uint8_t)text[i]] >= 0
                         ? match_special(t, text, limit, i, in_plain ? accept_plain : accept_default,
                                         in_plain ? reject_plain : reject_default, &mlen)
                         : -1;
        if (id < 0) {
            i++;
            continue;
        }
        size_t end = i;
        if (t->attr[id] & FT_ATTR_LSTRIP)
            while (end > frag && is_space_byte(text[end - 1]))
                end--;
        if (end > frag) {
            if ((rc = tokenize_fragment(t, text + frag, end - frag, after_special, &tv)))
                goto fail;
        }
        if ((rc = ft_tokvec_push(&tv, id)))
            goto fail;
        after_special = true;
        i += mlen;
        if (t->attr[id] & FT_ATTR_RSTRIP)
            while (i < len && is_space_byte(text[i]))
                i++;
        frag = i;
        continue;
    }
    if (frag < len && (rc = tokenize_fragment(t, text + frag, len - frag, after_special, &tv)))
        goto fail;
    if (add_special && t->add_eos && (rc = ft_tokvec_push(&tv, t->eos)))
        goto fail;

    if (!tv.v) { /* empty result: still hand back a freeable pointer */
        tv.v = malloc(sizeof(int32_t));
        if (!tv.v) {
            FT_LOG_E("out of memory");
            return FT_ENOMEM;
        }
    }
    *out = tv.v;
    *n_out = tv.n;
    return 0;

fail:
    free(tv.v);
    return rc;
}

int ft_tokenize(const struct ft_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t **out, size_t *n_out) {
    return tokenize_regions(t, text, len, add_special, parse_special, NULL, 0, out, n_out);
}

int ft_tokenize_spans(const struct ft_tokenizer *t, const char *text, size_t len, bool add_special,
                      const struct ft_text_span *plain, size_t n_plain, int32_t **out, size_t *n_out) {
    for (size_t k = 0; k < n_plain; k++) {
        if (plain[k].start > plain[k].end || plain[k].end > len || (k && plain[k].start < plain[k - 1].end)) {
            FT_LOG_E("plain-text spans must be sorted, disjoint and inside the text");
            return FT_EINVAL;
        }
    }
    return tokenize_regions(t, text, len, add_special, true, plain, n_plain, out, n_out);
}

/* ---- detokenize ----------------------------------------------------------------- */

static struct ft_str tok_piece(const struct ft_tokenizer *t, int32_t id, bool render_special) {
    struct ft_str s = {t->piece + t->piece_off[id], t->piece_off[id + 1] - t->piece_off[id]};
    if (!render_special && (t->attr[id] & (FT_ATTR_CONTROL | FT_ATTR_UNKNOWN)))
        s.len = 0;
    return s;
}

int ft_token_to_piece(const struct ft_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
    if (!t || (!buf && cap)) {
        FT_LOG_E("invalid argument (t %p, buf %p)", (const void *)t, (void *)buf);
        return FT_EINVAL;
    }
    if (id < 0 || id >= t->n_vocab) {
        FT_LOG_E("token id %d is outside the vocabulary (%d tokens)", id, t ? t->n_vocab : 0);
        return FT_EINVAL;
    }
    struct ft_str s = tok_piece(t, id, render_special);
    if (s.len)
        memcpy(buf, s.s, FT_MIN(s.len, cap));
    return (int)s.len;
}

void ft_detok_init(struct ft_detok *d, const struct ft_tokenizer *t, bool render_special) {
    memset(d, 0, sizeof(*d));
    d->t = t;
    d->render_special = render_special;
    d->at_start = false;
}

static const char k_replacement[3] = {'\xEF', '\xBF', '\xBD'}; /* U+FFFD */

/* Emit the complete characters of pending + piece; a trailing incomplete
 * sequence goes to newpend. Invalid bytes become U+FFFD (one per maximal
 * invalid subpart). Writes nothing past cap; returns the byte count or
 * FT_ERANGE (the caller then keeps its old state). */
static int detok_emit(const char *pending, int npending, const char *piece, size_t plen, char *out, size_t cap,
                      char *newpend, int *nnewpend) {
    char buf[8];
    size_t total = (size_t)npending + plen, w = 0, i = 0;
    *nnewpend = 0;
#define DETOK_AT(k) ((k) < (size_t)npending ? pending[k] : piece[(k) - (size_t)npending])
    while (i < total) {
        char c = DETOK_AT(i);
        if ((uint8_t)c < 0x80 && i >= (size_t)npending) { /* ASCII run straight from the piece */
            size_t j = i;
            while (j < total && (uint8_t)piece[j - (size_t)npending] < 0x80)
                j++;
            if (w + (j - i) > cap)
                return FT_ERANGE;
            memcpy(out + w, piece + (i - (size_t)npending), j - i);
            w += j - i;
            i = j;
            continue;
        }
        size_t avail = FT_MIN((size_t)4, total - i);
        for (size_t k = 0; k < avail; k++)
            buf[k] = DETOK_AT(i + k);
        uint32_t cp;
        int n = ft_utf8_classify(buf, avail, &cp);
        if (n == 0) { /* truncated: wait for the next token */
            memcpy(newpend, buf, avail);
            *nnewpend = (int)avail;
            break;
        }
        const char *src = n > 0 ? buf : k_replacement;
        size_t m = n > 0 ? (size_t)n : 3;
        if (w + m > cap)
            return FT_ERANGE;
        memcpy(out + w, src, m);
        w += m;
        i += (size_t)(n > 0 ? n : -n);
    }
#undef DETOK_AT
    return (int)w;
}

int ft_detok_push(struct ft_detok *d, int32_t id, char *out, size_t cap) {
    if (!d || !d->t || (!out && cap)) {
        FT_LOG_E("invalid argument (d %p, out %p)", (void *)d, (void *)out);
        return FT_EINVAL;
    }
    const struct ft_tokenizer *t = d->t;
    if (id < 0 || id >= t->n_vocab) {
        FT_LOG_E("token id %d is outside the vocabulary (%d tokens)", id, t->n_vocab);
        return FT_EINVAL;
    }
    struct ft_str p = tok_piece(t, id, d->render_special);
    bool at_start = d->at_start;
    if (id == t->bos && t->bos >= 0) {
        /* SentencePiece drops the dummy-prefix space of the first piece
         * after BOS, so that decode(tokenize(s, add_special)) == s. */
        at_start = t->add_space_prefix && !d->render_special;
    } else if (p.len) {
        if (at_start && p.s[0] == ' ') {
            p.s++;
            p.len--;
        }
        at_start = false;
    }
    char np[8];
    int nnp = 0;
    int n = detok_emit(d->pending, d->n_pending, p.s, p.len, out, cap, np, &nnp);
    if (n < 0) {
        FT_LOG_E("output buffer of %zu bytes is too small for token %d", cap, id);
        return n;
    }
    memcpy(d->pending, np, (size_t)nnp);
    d->n_pending = nnp;
    d->at_start = at_start;
    return n;
}

int ft_detok_flush(struct ft_detok *d, char *out, size_t cap) {
    if (!d || (!out && cap)) {
        FT_LOG_E("invalid argument (d %p, out %p)", (void *)d, (void *)out);
        return FT_EINVAL;
    }
    if (d->n_pending == 0) {
        d->at_start = false;
        return 0;
    }
    /* A truncated sequence is one maximal invalid subpart: one U+FFFD. */
    if (cap < 3) {
        FT_LOG_E("output buffer of %zu bytes is too small", cap);
        return FT_ERANGE;
    }
    memcpy(out, k_replacement, 3);
    d->n_pending = 0;
    d->at_start = false;
    return 3;
}

int ft_detokenize(const struct ft_tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out,
                  size_t *len) {
    if (!t || (!ids && n) || !out || !len) {
        FT_LOG_E("invalid argument");
        return FT_EINVAL;
    }
    *out = NULL;
    *len = 0;
    size_t step = 3 * ((size_t)t->max_piece_len + 8), cap = step + 1, w = 0;
    char *buf = malloc(cap);
    if (!buf) {
        FT_LOG_E("out of memory");
        return FT_ENOMEM;
    }
    struct ft_detok d;
    ft_detok_init(&d, t, render_special);
    for (size_t i = 0; i <= n; i++) {
        if (cap - w < step + 1) {
            size_t nc = cap * 2;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                FT_LOG_E("out of memory");
                return FT_ENOMEM;
            }
            buf = nb;
            cap = nc;
        }
        int k = i < n ? ft_detok_push(&d, ids[i], buf + w, cap - w - 1) : ft_detok_flush(&d, buf + w, cap - w - 1);
        if (k < 0) {
            free(buf);
            return k;
        }
        w += (size_t)k;
    }
    buf[w] = '\0';
    *out = buf;
    *len = w;
    return 0;
}
