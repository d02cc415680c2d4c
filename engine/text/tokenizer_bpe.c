/* Byte-level BPE ("gpt2" vocabularies: GPT-2, Llama 3, Qwen 2/2.5/3,
 * SmolLM, ...).
 *
 * 1. Pre-tokenize: split the text into words with the regex list of the
 *    vocabulary's tokenizer.ggml.pre. The regexes are not run by a regex
 *    engine: each one is a hand-written splitter over code points and their
 *    Unicode classes, a port of llama.cpp's unicode_regex_split_custom_*
 *    (whose output the conformance vectors encode, quirks included). A list
 *    of several regexes is applied in stages: each stage splits every word
 *    of the previous one, keeping both matches and the text between them.
 * 2. Byte-encode each word with the GPT-2 alphabet (bytes -> printable
 *    code points), start with one symbol per byte, and repeatedly merge the
 *    adjacent pair with the lowest merge rank (leftmost on ties) using a
 *    binary heap and a hash of the merges — O(n log n) per word.
 * 3. Emit the id of every final symbol.
 */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- pre-tokenizer names ----------------------------------------------------- */

struct pre_name {
    const char *name;
    enum ft_tok_pre pre;
    bool ignore_merges, add_bos;
};

/* tokenizer.ggml.pre -> splitter, with llama.cpp's per-family flags. */
static const struct pre_name k_pre_names[] = {
    {"default", FT_PRE_DEFAULT, false, false},
    {"llama3", FT_PRE_LLAMA3, true, true},
    {"llama-v3", FT_PRE_LLAMA3, true, true},
    {"llama-bpe", FT_PRE_LLAMA3, true, true},
    {"falcon3", FT_PRE_LLAMA3, true, true},
    {"falcon-h1", FT_PRE_LLAMA3, true, true},
    {"pixtral", FT_PRE_LLAMA3, true, true},
    {"midm-2.0", FT_PRE_LLAMA3, true, true},
    {"lfm2", FT_PRE_LLAMA3, true, true},
    {"dbrx", FT_PRE_LLAMA3, false, false},
    {"smaug-bpe", FT_PRE_LLAMA3, false, false},
    {"qwen2", FT_PRE_QWEN2, false, false},
    {"deepseek-r1-qwen", FT_PRE_QWEN2, false, false},
    {"kormo", FT_PRE_QWEN2, false, false},
    {"megrez", FT_PRE_QWEN2, false, false},
    {"stablelm2", FT_PRE_QWEN2, false, false},
    {"hunyuan", FT_PRE_QWEN2, false, false},
    {"grok-2", FT_PRE_QWEN2, false, false},
    {"gpt-2", FT_PRE_GPT2, false, false},
    {"gpt2", FT_PRE_GPT2, false, false},
    {"phi-2", FT_PRE_GPT2, false, false},
    {"mpt", FT_PRE_GPT2, false, false},
    {"olmo", FT_PRE_GPT2, false, false},
    {"jais", FT_PRE_GPT2, false, false},
    {"exaone4", FT_PRE_GPT2, false, false},
    {"trillion", FT_PRE_GPT2, false, false},
    {"mellum", FT_PRE_GPT2, false, false},
    {"starcoder", FT_PRE_STARCODER, false, false},
    {"refact", FT_PRE_STARCODER, false, false},
    {"command-r", FT_PRE_STARCODER, false, false},
    {"smollm", FT_PRE_STARCODER, false, false},
    {"codeshell", FT_PRE_STARCODER, false, false},
    {"exaone", FT_PRE_STARCODER, false, false},
    {"minerva-7b", FT_PRE_STARCODER, false, false},
};

bool ft_bpe_pre_from_name(const char *name, size_t len, enum ft_tok_pre *pre, bool *ignore_merges, bool *add_bos) {
    for (size_t i = 0; i < FT_ARRAY_LEN(k_pre_names); i++) {
        const struct pre_name *p = &k_pre_names[i];
        if (strlen(p->name) == len && !memcmp(p->name, name, len)) {
            *pre = p->pre;
            *ignore_merges = p->ignore_merges;
            *add_bos = p->add_bos;
            return true;
        }
    }
    return false;
}

/* ---- pre-tokenizer splitters --------------------------------------------------- */

/* The text as code points, with their classes. */
struct cptext {
    uint32_t *cp;
    uint16_t *fl;
    size_t n;
};

/* Word ends (exclusive, in code points), growable. */
struct ends {
    uint32_t *v;
    size_t n, cap;
};

static int ends_push(struct ends *e, size_t end) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        uint32_t *v = realloc(e->v, cap * sizeof(*v));
        if (!v) {
            FT_LOG_E("out of memory (%zu words)", cap);
            return FT_ENOMEM;
        }
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = (uint32_t)end;
    return 0;
}

#define OUT_OF_RANGE 0xFFFFFFFFu

/* A splitter covers the words [a, b) of one chunk. The accessors return
 * OUT_OF_RANGE / 0 outside the chunk, which is how the regex lookaheads
 * (?!\S) and "end of input" are expressed. */
struct split {
    const struct cptext *x;
    size_t a, b, prev;
    struct ends *out;
    int rc;
};

static inline uint32_t S_CP(const struct split *s, size_t pos) {
    return pos >= s->a && pos < s->b ? s->x->cp[pos] : OUT_OF_RANGE;
}

static inline uint16_t S_FL(const struct split *s, size_t pos) {
    return pos >= s->a && pos < s->b ? s->x->fl[pos] : 0;
}

/* End the current word at `end` (empty words are skipped). */
static void s_add(struct split *s, size_t end) {
    if (end > s->prev && !s->rc)
        s->rc = ends_push(s->out, end);
    s->prev = end;
}

#define WLN (FT_U_WHITESPACE | FT_U_LETTER | FT_U_NUMBER)

/* 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive; returns the match
 * length (0 if none). */
static size_t match_contraction(const struct split *s, size_t pos, bool icase) {
    if (S_CP(s, pos) != '\'' || pos + 1 >= s->b)
        return 0;
    uint32_t c1 = S_CP(s, pos + 1);
    if (icase)
        c1 = ft_unicode_tolower(c1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return 2;
    if (pos + 2 < s->b) {
        uint32_t c2 = S_CP(s, pos + 2);
        if (icase)
            c2 = ft_unicode_tolower(c2);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
            return 3;
    }
    return 0;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static void split_gpt2(struct split *s) {
    for (size_t pos = s->a; pos < s->b;) {
        const uint32_t cpt = S_CP(s, pos);
        const uint16_t f = S_FL(s, pos);

        size_t m = match_contraction(s, pos, false);
        if (m) {
            pos += m;
            s_add(s, pos);
            continue;
        }
        uint16_t f2 = cpt == ' ' ? S_FL(s, pos + 1) : f;
        if (f2 & FT_U_LETTER) { /* ' ?\p{L}+' */
            pos += cpt == ' ';
            while (f2 & FT_U_LETTER)
                f2 = S_FL(s, ++pos);
            s_add(s, pos);
            continue;
        }
        if (f2 & FT_U_NUMBER) { /* ' ?\p{N}+' */
            pos += cpt == ' ';
            while (f2 & FT_U_NUMBER)
                f2 = S_FL(s, ++pos);
            s_add(s, pos);
            continue;
        }
        if (!(f2 & WLN) && f2) { /* ' ?[^\s\p{L}\p{N}]+' */
            pos += cpt == ' ';
            while (!(f2 & WLN) && f2)
                f2 = S_FL(s, ++pos);
            s_add(s, pos);
            continue;
        }
        size_t nws = 0;
        while (S_FL(s, pos + nws) & FT_U_WHITESPACE)
            nws++;
        if (nws > 1 && S_CP(s, pos + nws) != OUT_OF_RANGE) { /* '\s+(?!\S)': leave one for the next word */
            pos += nws - 1;
            s_add(s, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            s_add(s, pos);
            continue;
        }
        s_add(s, ++pos); /* no alternative matches: a word of its own */
    }
}

/* Llama 3 (max_digits 3) and Qwen 2 (max_digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(struct split *s, size_t max_digits) {
    for (size_t pos = s->a; pos < s->b;) {
        const uint32_t cpt = S_CP(s, pos);
        const uint16_t f = S_FL(s, pos);

        size_t m = match_contraction(s, pos, true);
        if (m) {
            pos += m;
            s_add(s, pos);
            continue;
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(cpt == '\r' || cpt == '\n' || (f & FT_U_NUMBER))) {
            if ((f & FT_U_LETTER) || (S_FL(s, pos + 1) & FT_U_LETTER)) {
                pos++;
                while (S_FL(s, pos) & FT_U_LETTER)
                    pos++;
                s_add(s, pos);
                continue;
            }
        }
        /* \p{N}{1,max_digits} */
        if (f & FT_U_NUMBER) {
            size_t ini = pos;
            while (S_FL(s, pos) & FT_U_NUMBER) {
                if (++pos - ini >= max_digits) {
                    s_add(s, pos);
                    ini = pos;
                }
            }
            s_add(s, pos);
            continue;
        }
        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
        uint16_t f2 = cpt == ' ' ? S_FL(s, pos + 1) : f;
        if (!(f2 & WLN) && f) {
            pos += cpt == ' ';
            while (!(f2 & WLN) && f2)
                f2 = S_FL(s, ++pos);
            uint32_t c2 = S_CP(s, pos);
            while (c2 == '\r' || c2 == '\n')
                c2 = S_CP(s, ++pos);
            s_add(s, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (S_FL(s, pos + nws) & FT_U_WHITESPACE) {
            uint32_t c2 = S_CP(s, pos + nws);
            if (c2 == '\r' || c2 == '\n')
                last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            pos = last_rn;
            s_add(s, pos);
            continue;
        }
        if (nws > 1 && S_CP(s, pos + nws) != OUT_OF_RANGE) { /* \s+(?!\S) */
            pos += nws - 1;
            s_add(s, pos);
            continue;
        }
        if (nws > 0) { /* \s+ */
            pos += nws;
            s_add(s, pos);
            continue;
        }
        s_add(s, ++pos);
    }
}

/* Stages written as "find matches, keep the gaps" (what std::regex
 * iteration does in llama.cpp for regexes without a custom splitter). */
enum match_kind {
    M_NUMBER_ONE,  /* \p{N}                     */
    M_NUMBER_RUN,  /* \p{N}+                    */
    M_PUNCT_RUN,   /* [\p{P}\$\+<=>\^~\|]+      */
    M_THREE_DIGIT, /* [0-9][0-9][0-9]           */
};

static bool is_punct_ext(const struct split *s, size_t pos) {
    uint32_t c = S_CP(s, pos);
    if (c == OUT_OF_RANGE)
        return false;
    if (c < 128)
        return strchr("!\"#%&'()*,-./:;?@[\\]_{}$+<=>^~|", (int)c) && c != 0;
    uint16_t f = S_FL(s, pos);
    return !(f & FT_U_WHITESPACE) && (f & FT_U_PUNCT);
}

static bool is_ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }

static void split_matches(struct split *s, enum match_kind kind) {
    size_t pos = s->a;
    while (pos < s->b) {
        size_t mlen = 0;
        switch (kind) {
        case M_NUMBER_ONE:
            mlen = (S_FL(s, pos) & FT_U_NUMBER) ? 1 : 0;
            break;
        case M_NUMBER_RUN:
            while (S_FL(s, pos + mlen) & FT_U_NUMBER)
                mlen++;
            break;
        case M_PUNCT_RUN:
            while (is_punct_ext(s, pos + mlen))
                mlen++;
            break;
        case M_THREE_DIGIT:
            if (is_ascii_digit(S_CP(s, pos)) && is_ascii_digit(S_CP(s, pos + 1)) && is_ascii_digit(S_CP(s, pos + 2)))
                mlen = 3;
            break;
        }
        if (!mlen) {
            pos++;
            continue;
        }
        s_add(s, pos); /* the gap before the match */
        pos += mlen;
        s_add(s, pos);
    }
    s_add(s, s->b); /* the gap after the last match */
}

enum stage {
    ST_GPT2,
    ST_LLAMA3,
    ST_QWEN2,
    ST_NUMBER_ONE,
    ST_NUMBER_RUN,
    ST_PUNCT_RUN,
    ST_THREE_DIGIT,
};

static void run_stage(struct split *s, enum stage st) {
    switch (st) {
    case ST_GPT2: split_gpt2(s); break;
    case ST_LLAMA3: split_llama3(s, 3); break;
    case ST_QWEN2: split_llama3(s, 1); break;
    case ST_NUMBER_ONE: split_matches(s, M_NUMBER_ONE); break;
    case ST_NUMBER_RUN: split_matches(s, M_NUMBER_RUN); break;
    case ST_PUNCT_RUN: split_matches(s, M_PUNCT_RUN); break;
    case ST_THREE_DIGIT: split_matches(s, M_THREE_DIGIT); break;
    }
}

int ft_bpe_pretokenize(enum ft_tok_pre pre, const char *text, size_t len, uint32_t **ends_out, size_t *n_words) {
    static const enum stage st_default[] = {ST_PUNCT_RUN, ST_GPT2, ST_NUMBER_RUN, ST_THREE_DIGIT};
    static const enum stage st_gpt2[] = {ST_GPT2};
    static const enum stage st_llama3[] = {ST_LLAMA3};
    static const enum stage st_qwen2[] = {ST_QWEN2};
    static const enum stage st_starcoder[] = {ST_NUMBER_ONE, ST_GPT2};
    const enum stage *stages;
    size_t n_stages;
    switch (pre) {
    case FT_PRE_GPT2: stages = st_gpt2; n_stages = 1; break;
    case FT_PRE_LLAMA3: stages = st_llama3; n_stages = 1; break;
    case FT_PRE_QWEN2: stages = st_qwen2; n_stages = 1; break;
    case FT_PRE_STARCODER: stages = st_starcoder; n_stages = 2; break;
    case FT_PRE_DEFAULT: stages = st_default; n_stages = 4; break;
    default:
        FT_LOG_E("no pre-tokenizer %d", (int)pre);
        return FT_EINVAL;
    }

    *ends_out = NULL;
    *n_words = 0;
    int rc = 0;
    struct cptext x = {malloc((len + 1) * sizeof(uint32_t)), malloc((len + 1) * sizeof(uint16_t)), 0};
    uint32_t *boff = malloc((len + 1) * sizeof(uint32_t)); /* code point -> byte offset */
    struct ends cur = {NULL, 0, 0}, next = {NULL, 0, 0};
    if (!x.cp || !x.fl || !boff) {
        FT_LOG_E("out of memory for %zu bytes of text", len);
        rc = FT_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = ft_utf8_decode(text + i, len - i, &cp);
        if (k <= 0) { /* cannot happen for validated text; be safe anyway */
            cp = 0xFFFD;
            k = 1;
        }
        boff[x.n] = (uint32_t)i;
        x.cp[x.n] = cp;
        x.fl[x.n] = ft_unicode_flags(cp);
        x.n++;
        i += (size_t)k;
    }
    boff[x.n] = (uint32_t)len;
    if (x.n == 0)
        goto done;

    if ((rc = ends_push(&cur, x.n)))
        goto done;
    for (size_t si = 0; si < n_stages; si++) {
        next.n = 0;
        size_t a = 0;
        for (size_t w = 0; w < cur.n; w++) {
            struct split s = {&x, a, cur.v[w], a, &next, 0};
            run_stage(&s, stages[si]);
            if ((rc = s.rc))
                goto done;
            a = cur.v[w];
        }
        struct ends tmp = cur;
        cur = next;
        next = tmp;
    }
    for (size_t w = 0; w < cur.n; w++) /* code points -> bytes */
        cur.v[w] = boff[cur.v[w]];
    *ends_out = cur.v;
    *n_words = cur.n;
    cur.v = NULL;

done:
    free(x.cp);
    free(x.fl);
    free(boff);
    free(cur.v);
    free(next.v);
    return rc;
}

/* ---- merges --------------------------------------------------------------------- */

/* BPE: a pair merges when the merges table lists it; the lower its rank,
 * the sooner. */
static bool bpe_pair_key(const struct ft_tokenizer *t, const char *s, size_t len, size_t left_n, double *key) {
    int32_t rank = ft_tok_merge_rank(t, s, len, left_n);
    if (rank < 0)
        return false;
    *key = -(double)rank;
    return true;
}

int ft_bpe_tokenize(const struct ft_tokenizer *t, const char *text, size_t len, struct ft_tokvec *out) {
    uint32_t *ends = NULL;
    size_t n_words = 0;
    int rc = ft_bpe_pretokenize(t->pre, text, len, &ends, &n_words);
    if (rc)
        return rc;

    /* the byte-level alphabet, UTF-8 encoded */
    char enc[256][2];
    uint8_t enc_len[256];
    for (int b = 0; b < 256; b++) {
        char buf[4];
        enc_len[b] = (uint8_t)ft_utf8_encode(ft_bpe_byte_to_cp((uint8_t)b), buf);
        memcpy(enc[b], buf, 2);
    }

    size_t max_word = 0;
    for (size_t w = 0, a = 0; w < n_words; a = ends[w++])
        max_word = FT_MAX(max_word, (size_t)ends[w] - a);
    char *wbuf = malloc(2 * max_word + 1);
    struct ft_tok_sym *sym = malloc((max_word + 1) * sizeof(*sym));
    struct ft_bigram_heap heap = {NULL, 0, 0};
    if (!wbuf || !sym) {
        FT_LOG_E("out of memory for a word of %zu bytes", max_word);
        rc = FT_ENOMEM;
        goto done;
    }

    for (size_t w = 0, a = 0; w < n_words; a = ends[w++]) {
        size_t n = 0;
        for (size_t i = a; i < ends[w]; i++) {
            uint8_t b = (uint8_t)text[i];
            memcpy(wbuf + n, enc[b], enc_len[b]);
            n += enc_len[b];
        }
        if (t->ignore_merges) { /* Llama 3: a word that is a token is taken whole */
            int32_t id = ft_tok_lookup(t, wbuf, n);
            if (id >= 0) {
                if ((rc = ft_tokvec_push(out, id)))
                    goto done;
                continue;
            }
        }
        /* the alphabet is U+0021..U+0143: a symbol starts as 1 or 2 bytes */
        int32_t n_sym;
        if ((rc = ft_tok_merge(t, wbuf, n, bpe_pair_key, &heap, sym, &n_sym)))
            goto done;
        for (int32_t i = 0; i != -1 && n_sym > 0; i = sym[i].next) {
            const char *p = wbuf + sym[i].start;
            int32_t id = ft_tok_lookup(t, p, sym[i].n);
            if (id >= 0) {
                if ((rc = ft_tokvec_push(out, id)))
                    goto done;
                continue;
            }
            /* not a token (a vocabulary whose merges produce strings it does
             * not contain): llama.cpp tries each byte alone, else drops it */
            for (uint32_t k = 0; k < sym[i].n; k++) {
                int32_t bid = ft_tok_lookup(t, p + k, 1);
                if (bid >= 0 && (rc = ft_tokvec_push(out, bid)))
                    goto done;
            }
        }
    }

done:
    free(ends);
    free(wbuf);
    free(sym);
    free(heap.v);
    return rc;
}
