/* The token trie of a vocabulary and the grammar matcher that walks it
 * (include/ft/grammar.h).
 *
 * A parse state is a set of stacks. A stack is a chain of nodes
 * (pos, parent): `pos` is the next element to match in some alternative and
 * `parent` is where to continue when that alternative ends; node 0 (EMPTY)
 * is the bottom, so a state holding EMPTY is a complete sentence. Nodes are
 * hash-consed: equal stacks are equal ids, sets deduplicate by id, and the
 * result of stepping one stack by one byte is memoized by (node, byte).
 * After expansion every stack's top is a byte class (or EMPTY).
 *
 * A mask walks the trie in preorder with one state per depth; a byte no
 * stack accepts skips the node's whole subtree. The mask of each state is
 * cached, so a state that comes back (inside a JSON string after every
 * token) is a lookup. */
#include "grammar_internal.h"

#include "ft/clock.h"
#include "ft/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the trie --------------------------------------------------------------- */

#define VOCAB_MAX_TOKEN_BYTES 255

struct ft_grammar_vocab {
    int32_t n_vocab;
    int32_t n_nodes;
    uint8_t *byte;        /* (n_nodes) the byte that leads into the node */
    uint8_t *depth;       /* (n_nodes) 1 for the root's children */
    int32_t *subtree_end; /* (n_nodes) first node after the node's subtree */
    int32_t *tok_start;   /* (n_nodes + 1) tokens ending at node i: toks[tok_start[i] .. tok_start[i+1]) */
    int32_t *toks;
    int32_t n_toks;
    int32_t max_depth;
    uint32_t *tok_off;    /* (n_vocab + 1) a token's bytes: blob[tok_off[id] .. tok_off[id+1]) */
    uint8_t *blob;
    uint32_t *eog_bits;   /* end-of-generation tokens, ceil(n_vocab/32) words */
};

struct vtok {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
};

static int cmp_vtok(const void *a, const void *b) {
    const struct vtok *x = a, *y = b;
    uint32_t n = FT_MIN(x->len, y->len);
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id - y->id;
}

void ft_grammar_vocab_free(struct ft_grammar_vocab *v) {
    if (!v)
        return;
    free(v->byte);
    free(v->depth);
    free(v->subtree_end);
    free(v->tok_start);
    free(v->toks);
    free(v->tok_off);
    free(v->blob);
    free(v->eog_bits);
    free(v);
}

int32_t ft_grammar_vocab_n_tokens(const struct ft_grammar_vocab *v) { return v->n_vocab; }
size_t ft_grammar_vocab_n_nodes(const struct ft_grammar_vocab *v) { return (size_t)v->n_nodes; }
size_t ft_grammar_vocab_bytes(const struct ft_grammar_vocab *v) {
    size_t n = (size_t)v->n_nodes, nv = (size_t)v->n_vocab;
    return sizeof(*v) + n * (1 + 1 + 4 + 4) + 4 + (size_t)v->n_toks * 4 + (nv + 1) * 4 + v->tok_off[nv] +
           (nv + 31) / 32 * 4;
}

int ft_grammar_vocab_new(const struct ft_tokenizer *tok, struct ft_grammar_vocab **out) {
    *out = NULL;
    const int32_t nv = ft_tokenizer_n_vocab(tok);
    struct ft_grammar_vocab *v = calloc(1, sizeof(*v));
    struct vtok *vt = NULL;
    int32_t *open = NULL, *pair_node = NULL;
    char buf[1024];
    if (!v || nv <= 0)
        goto oom;
    v->n_vocab = nv;
    v->tok_off = malloc(sizeof(uint32_t) * ((size_t)nv + 1));
    v->eog_bits = calloc(((size_t)nv + 31) / 32, sizeof(uint32_t));
    vt = malloc(sizeof(*vt) * (size_t)nv);
    if (!v->tok_off || !v->eog_bits || !vt)
        goto oom;
    /* pass 1: sizes; pass 2: bytes */
    size_t total = 0;
    for (int32_t id = 0; id < nv; id++) {
        int n = ft_token_to_piece(tok, id, false, buf, sizeof(buf));
        total += n > 0 ? (size_t)FT_MIN(n, (int)sizeof(buf)) : 0;
    }
    if (!(v->blob = malloc(total + 1)))
        goto oom;
    size_t off = 0;
    int32_t n_vt = 0;
    for (int32_t id = 0; id < nv; id++) {
        v->tok_off[id] = (uint32_t)off;
        if (ft_tokenizer_is_eog(tok, id)) {
            v->eog_bits[id >> 5] |= 1u << (id & 31);
            continue;
        }
        if (ft_tokenizer_is_control(tok, id))
            continue;
        int n = ft_token_to_piece(tok, id, false, buf, sizeof(buf));
        if (n <= 0 || n > (int)sizeof(buf))
            continue;
        memcpy(v->blob + off, buf, (size_t)n);
        if (n <= VOCAB_MAX_TOKEN_BYTES)
            vt[n_vt++] = (struct vtok){v->blob + off, (uint32_t)n, id};
        off += (size_t)n;
    }
    v->tok_off[nv] = (uint32_t)off;
    qsort(vt, (size_t)n_vt, sizeof(*vt), cmp_vtok);

    /* nodes in preorder: a token adds the nodes below its common prefix with
     * the previous one (sorted order is preorder) */
    size_t cap = 1024;
    v->byte = malloc(cap);
    v->depth = malloc(cap);
    v->subtree_end = malloc(cap * sizeof(int32_t));
    pair_node = malloc(sizeof(int32_t) * ((size_t)n_vt + 1));
    open = malloc(sizeof(int32_t) * (VOCAB_MAX_TOKEN_BYTES + 2));
    if (!v->byte || !v->depth || !v->subtree_end || !pair_node || !open)
        goto oom;
    int32_t n = 0, cur = 0;
    for (int32_t k = 0; k < n_vt; k++) {
        uint32_t lcp = 0;
        if (k > 0) {
            uint32_t m = FT_MIN(vt[k].len, vt[k - 1].len);
            while (lcp < m && vt[k].p[lcp] == vt[k - 1].p[lcp])
                lcp++;
        }
        for (int32_t d = cur; d > (int32_t)lcp; d--)
            v->subtree_end[open[d]] = n;
        for (uint32_t d = lcp + 1; d <= vt[k].len; d++) {
            if ((size_t)n == cap) {
                cap *= 2;
                uint8_t *b1 = realloc(v->byte, cap);
                if (b1)
                    v->byte = b1;
                uint8_t *b2 = realloc(v->depth, cap);
                if (b2)
                    v->depth = b2;
                int32_t *b3 = realloc(v->subtree_end, cap * sizeof(int32_t));
                if (b3)
                    v->subtree_end = b3;
                if (!b1 || !b2 || !b3)
                    goto oom;
            }
            v->byte[n] = vt[k].p[d - 1];
            v->depth[n] = (uint8_t)d;
            open[d] = n++;
        }
        cur = (int32_t)vt[k].len;
        v->max_depth = FT_MAX(v->max_depth, cur);
        pair_node[k] = open[vt[k].len];
    }
    for (int32_t d = cur; d >= 1; d--)
        v->subtree_end[open[d]] = n;
    v->n_nodes = n;
    v->tok_start = calloc((size_t)n + 1, sizeof(int32_t));
    v->toks = malloc(sizeof(int32_t) * ((size_t)n_vt + 1));
    if (!v->tok_start || !v->toks)
        goto oom;
    for (int32_t k = 0; k < n_vt; k++) {
        v->tok_start[pair_node[k] + 1]++;
        v->toks[k] = vt[k].id; /* pair_node is nondecreasing: already grouped */
    }
    for (int32_t i = 0; i < n; i++)
        v->tok_start[i + 1] += v->tok_start[i];
    v->n_toks = n_vt;
    free(vt);
    free(open);
    free(pair_node);
    *out = v;
    return FT_OK;
oom:
    free(vt);
    free(open);
    free(pair_node);
    ft_grammar_vocab_free(v);
    FT_LOG_E("out of memory for the token trie of %d tokens", (int)nv);
    return FT_ENOMEM;
}

/* ---- the matcher ---------------------------------------------------------- */

#define NODE_EMPTY 0
#define MAX_NODES (1 << 22)  /* distinct stacks one request may create */
#define MAX_SET 1024         /* parses alive at once */
#define MASK_CACHE 32

struct gnode {
    int32_t pos, parent, hnext;
    uint32_t mark;  /* expansion: visited / emitted in this epoch */
    uint32_t mark2; /* set unions */
};

struct memo {
    int64_t key; /* node * 256 + byte, -1 empty */
    int32_t off, len;
};

struct mcache {
    uint64_t hash;
    int32_t *state;
    int32_t n_state;
    uint32_t *bits;
    int32_t n_allowed;
    uint64_t used;
};

struct ft_grammar_matcher {
    const struct ft_grammar *g;
    const struct ft_grammar_vocab *v;
    struct gnode *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *buckets;
    uint32_t n_buckets;
    uint32_t epoch, epoch2;
    struct memo *memo;
    uint32_t memo_cap, memo_n;
    int32_t *pool; /* memoized step results */
    size_t pool_n, pool_cap;
    int32_t *work; /* expansion work list: (pos, parent) pairs */
    size_t work_cap;
    int32_t *out;  /* expansion output */
    int32_t n_out, cap_out;
    int32_t *state, *init_state;
    int32_t n_state, n_init, cap_state;
    /* trie walk */
    int32_t *scratch; /* unions of multi-stack states, per depth */
    size_t scratch_n, scratch_cap;
    int32_t *lv_off, *lv_len;
    bool *lv_pool; /* level's set lives in pool (true) or scratch (false) */
    size_t *lv_scratch_end;
    int32_t n_words;
    uint32_t *bits;
    int32_t n_allowed;
    bool bits_valid;
    struct mcache cache[MASK_CACHE];
    uint64_t use_clock;
    struct ft_grammar_stats stats;
    int err; /* sticky FT_E* from a failed expansion */
};

static uint32_t node_hash(int32_t pos, int32_t parent) {
    uint64_t k = ((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent;
    k *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(k >> 32);
}

static int32_t intern(struct ft_grammar_matcher *m, int32_t pos, int32_t parent) {
    uint32_t h = node_hash(pos, parent) & (m->n_buckets - 1);
    for (int32_t i = m->buckets[h]; i >= 0; i = m->nodes[i].hnext)
        if (m->nodes[i].pos == pos && m->nodes[i].parent == parent)
            return i;
    if (m->n_nodes >= MAX_NODES) {
        m->err = FT_ERANGE;
        return -1;
    }
    if (m->n_nodes == m->cap_nodes) {
        int32_t cap = m->cap_nodes * 2;
        struct gnode *p = realloc(m->nodes, sizeof(*p) * (size_t)cap);
        if (!p) {
            m->err = FT_ENOMEM;
            return -1;
        }
        m->nodes = p;
        m->cap_nodes = cap;
    }
    if ((uint32_t)m->n_nodes >= m->n_buckets) {
        uint32_t nb = m->n_buckets * 2;
        int32_t *b = malloc(sizeof(int32_t) * nb);
        if (!b) {
            m->err = FT_ENOMEM;
            return -1;
        }
        memset(b, 0xff, sizeof(int32_t) * nb);
        for (int32_t i = 1; i < m->n_nodes; i++) {
            uint32_t k = node_hash(m->nodes[i].pos, m->nodes[i].parent) & (nb - 1);
            m->nodes[i].hnext = b[k];
            b[k] = i;
        }
        free(m->buckets);
        m->buckets = b;
        m->n_buckets = nb;
        h = node_hash(pos, parent) & (nb - 1);
    }
    int32_t id = m->n_nodes++;
    m->nodes[id] = (struct gnode){pos, parent, m->buckets[h], 0, 0};
    m->buckets[h] = id;
    return id;
}

static int push_out(struct ft_grammar_matcher *m, int32_t id) {
    if (m->nodes[id].mark == m->epoch)
        return 0;
    m->nodes[id].mark = m->epoch;
    if (m->n_out >= MAX_SET) {
        m->err = FT_ERANGE;
        return -1;
    }
    if (m->n_out == m->cap_out) {
        int32_t cap = m->cap_out ? m->cap_out * 2 : 64;
        int32_t *p = realloc(m->out, sizeof(int32_t) * (size_t)cap);
        if (!p) {
            m->err = FT_ENOMEM;
            return -1;
        }
        m->out = p;
        m->cap_out = cap;
    }
    m->out[m->n_out++] = id;
    return 0;
}

/* Expand (pos, parent) into stacks whose top is a byte class, appending them
 * to m->out (deduplicated within the epoch). Nullable cycles end at the
 * visited mark of the rule-reference node; left recursion was rejected when
 * compiling, so the work list is bounded by the grammar's size. */
static int expand(struct ft_grammar_matcher *m, int32_t pos0, int32_t parent0) {
    const struct ft_grammar *g = m->g;
    size_t nw = 0;
    m->work[nw++] = pos0;
    m->work[nw++] = parent0;
    while (nw) {
        int32_t parent = m->work[--nw], pos = m->work[--nw];
        for (;;) {
            uint32_t e = g->elems[pos];
            uint32_t k = GE_KIND(e);
            if (k == GE_END || k == GE_ALT) {
                if (parent == NODE_EMPTY) {
                    if (push_out(m, NODE_EMPTY))
                        return -1;
                    break;
                }
                pos = m->nodes[parent].pos;
                parent = m->nodes[parent].parent;
                continue;
            }
            int32_t id = intern(m, pos, parent);
            if (id < 0)
                return -1;
            if (k == GE_CHARS) {
                if (push_out(m, id))
                    return -1;
                break;
            }
            if (m->nodes[id].mark == m->epoch)
                break; /* this reference was expanded in this epoch */
            m->nodes[id].mark = m->epoch;
            int32_t r = GE_ARG(e);
            uint32_t kn = GE_KIND(g->elems[pos + 1]);
            int32_t cont = (kn == GE_END || kn == GE_ALT) ? parent : intern(m, pos + 1, parent);
            if (cont < 0)
                return -1;
            int32_t na = g->rule_alt[r + 1] - g->rule_alt[r];
            if (nw + 2 * (size_t)na > m->work_cap) {
                size_t cap = m->work_cap * 2 + 2 * (size_t)na;
                int32_t *p = realloc(m->work, sizeof(int32_t) * cap);
                if (!p) {
                    m->err = FT_ENOMEM;
                    return -1;
                }
                m->work = p;
                m->work_cap = cap;
            }
            for (int32_t a = g->rule_alt[r + 1] - 1; a >= g->rule_alt[r]; a--) {
                m->work[nw++] = g->alt_start[a];
                m->work[nw++] = cont;
            }
            break;
        }
    }
    return 0;
}

static uint64_t memo_hash(int64_t key) { return (uint64_t)key * 0x9e3779b97f4a7c15ull >> 20; }

static int memo_grow(struct ft_grammar_matcher *m) {
    uint32_t cap = m->memo_cap ? m->memo_cap * 2 : 4096;
    struct memo *t = malloc(sizeof(*t) * cap);
    if (!t)
        return FT_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        t[i].key = -1;
    for (uint32_t i = 0; i < m->memo_cap; i++) {
        if (m->memo[i].key < 0)
            continue;
        uint32_t k = (uint32_t)memo_hash(m->memo[i].key) & (cap - 1);
        while (t[k].key >= 0)
            k = (k + 1) & (cap - 1);
        t[k] = m->memo[i];
    }
    free(m->memo);
    m->memo = t;
    m->memo_cap = cap;
    return FT_OK;
}

/* The stacks after `node` reads `c`: a slice of m->pool (off, len). */
static int step(struct ft_grammar_matcher *m, int32_t node, unsigned c, int32_t *off, int32_t *len) {
    int64_t key = (int64_t)node * 256 + c;
    uint32_t k = (uint32_t)memo_hash(key) & (m->memo_cap - 1);
    while (m->memo[k].key >= 0) {
        if (m->memo[k].key == key) {
            *off = m->memo[k].off;
            *len = m->memo[k].len;
            return 0;
        }
        k = (k + 1) & (m->memo_cap - 1);
    }
    m->n_out = 0;
    if (node != NODE_EMPTY) {
        const struct gnode *n = &m->nodes[node];
        if (gset_has(&m->g->sets[GE_ARG(m->g->elems[n->pos])], c)) {
            m->epoch++;
            if (expand(m, n->pos + 1, m->nodes[node].parent))
                return -1;
        }
    }
    if (m->pool_n + (size_t)m->n_out > m->pool_cap) {
        size_t cap = m->pool_cap * 2 + (size_t)m->n_out;
        int32_t *p = realloc(m->pool, sizeof(int32_t) * cap);
        if (!p) {
            m->err = FT_ENOMEM;
            return -1;
        }
        m->pool = p;
        m->pool_cap = cap;
    }
    if (m->n_out)
        memcpy(m->pool + m->pool_n, m->out, sizeof(int32_t) * (size_t)m->n_out);
    *off = (int32_t)m->pool_n;
    *len = m->n_out;
    m->pool_n += (size_t)m->n_out;
    if (m->pool_n > (size_t)INT32_MAX / 2) {
        m->err = FT_ERANGE;
        return -1;
    }
    if ((m->memo_n + 1) * 2 > m->memo_cap) {
        if (memo_grow(m)) {
            m->err = FT_ENOMEM;
            return -1;
        }
        k = (uint32_t)memo_hash(key) & (m->memo_cap - 1);
        while (m->memo[k].key >= 0)
            k = (k + 1) & (m->memo_cap - 1);
    }
    m->memo[k] = (struct memo){key, *off, *len};
    m->memo_n++;
    return 0;
}

/* A set of stacks after reading c, into scratch at its end (dedup by mark2):
 * the slice is scratch[*off .. *off + *len). */
static int step_set(struct ft_grammar_matcher *m, const int32_t *set_base_is_pool_dummy, bool in_pool, int32_t off,
                    int32_t len, unsigned c, int32_t *out_off, int32_t *out_len) {
    (void)set_base_is_pool_dummy;
    /* first make sure every member's step is memoized (step() may move pool,
     * scratch is never touched by step) */
    for (int32_t i = 0; i < len; i++) {
        int32_t s = in_pool ? m->pool[off + i] : m->scratch[off + i];
        int32_t o, l;
        if (step(m, s, c, &o, &l))
            return -1;
    }
    m->epoch2++;
    size_t start = m->scratch_n;
    for (int32_t i = 0; i < len; i++) {
        int32_t s = in_pool ? m->pool[off + i] : m->scratch[off + i];
        int32_t o, l;
        step(m, s, c, &o, &l); /* memoized: cannot fail now */
        if (m->scratch_n + (size_t)l > m->scratch_cap) {
            size_t cap = m->scratch_cap * 2 + (size_t)l;
            int32_t *p = realloc(m->scratch, sizeof(int32_t) * cap);
            if (!p) {
                m->err = FT_ENOMEM;
                return -1;
            }
            m->scratch = p;
            m->scratch_cap = cap;
        }
        for (int32_t j = 0; j < l; j++) {
            int32_t t = m->pool[o + j];
            if (m->nodes[t].mark2 == m->epoch2)
                continue;
            m->nodes[t].mark2 = m->epoch2;
            m->scratch[m->scratch_n++] = t;
        }
        if (m->scratch_n - start > MAX_SET) {
            m->err = FT_ERANGE;
            return -1;
        }
    }
    *out_off = (int32_t)start;
    *out_len = (int32_t)(m->scratch_n - start);
    return 0;
}

void ft_grammar_matcher_free(struct ft_grammar_matcher *m) {
    if (!m)
        return;
    free(m->nodes);
    free(m->buckets);
    free(m->memo);
    free(m->pool);
    free(m->work);
    free(m->out);
    free(m->state);
    free(m->init_state);
    free(m->scratch);
    free(m->lv_off);
    free(m->lv_len);
    free(m->lv_pool);
    free(m->lv_scratch_end);
    free(m->bits);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->cache[i].state);
        free(m->cache[i].bits);
    }
    free(m);
}

static int set_state(struct ft_grammar_matcher *m, const int32_t *s, int32_t n) {
    if (n > m->cap_state) {
        int32_t *p = realloc(m->state, sizeof(int32_t) * (size_t)n);
        if (!p)
            return FT_ENOMEM;
        m->state = p;
        m->cap_state = n;
    }
    memmove(m->state, s, sizeof(int32_t) * (size_t)n);
    m->n_state = n;
    m->bits_valid = false;
    return FT_OK;
}

int ft_grammar_matcher_new(const struct ft_grammar *g, const struct ft_grammar_vocab *v,
                           struct ft_grammar_matcher **out) {
    *out = NULL;
    struct ft_grammar_matcher *m = calloc(1, sizeof(*m));
    if (!m)
        goto oom;
    m->g = g;
    m->v = v;
    m->cap_nodes = 1024;
    m->n_buckets = 1024;
    m->work_cap = 256;
    m->pool_cap = 4096;
    m->scratch_cap = 4096;
    m->n_words = (v->n_vocab + 31) / 32;
    m->nodes = malloc(sizeof(*m->nodes) * (size_t)m->cap_nodes);
    m->buckets = malloc(sizeof(int32_t) * m->n_buckets);
    m->work = malloc(sizeof(int32_t) * m->work_cap);
    m->pool = malloc(sizeof(int32_t) * m->pool_cap);
    m->scratch = malloc(sizeof(int32_t) * m->scratch_cap);
    m->lv_off = malloc(sizeof(int32_t) * ((size_t)v->max_depth + 1));
    m->lv_len = malloc(sizeof(int32_t) * ((size_t)v->max_depth + 1));
    m->lv_pool = malloc(sizeof(bool) * ((size_t)v->max_depth + 1));
    m->lv_scratch_end = malloc(sizeof(size_t) * ((size_t)v->max_depth + 1));
    m->bits = malloc(sizeof(uint32_t) * (size_t)m->n_words);
    if (!m->nodes || !m->buckets || !m->work || !m->pool || !m->scratch || !m->lv_off || !m->lv_len ||
        !m->lv_pool || !m->lv_scratch_end || !m->bits || memo_grow(m))
        goto oom;
    memset(m->buckets, 0xff, sizeof(int32_t) * m->n_buckets);
    m->nodes[0] = (struct gnode){-1, -1, -1, 0, 0}; /* EMPTY: never in a bucket */
    m->n_nodes = 1;
    m->epoch = 1;
    m->n_out = 0;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (expand(m, g->alt_start[a], NODE_EMPTY))
            goto fail;
    if (!(m->init_state = malloc(sizeof(int32_t) * (size_t)FT_MAX(m->n_out, 1))))
        goto oom;
    memcpy(m->init_state, m->out, sizeof(int32_t) * (size_t)m->n_out);
    m->n_init = m->n_out;
    if (set_state(m, m->init_state, m->n_init))
        goto oom;
    *out = m;
    return FT_OK;
fail:
    if (m->err != FT_ENOMEM) {
        int rc = m->err;
        ft_grammar_matcher_free(m);
        FT_LOG_E("the grammar is too ambiguous: more than %d parses at its start", MAX_SET);
        return rc;
    }
oom:
    ft_grammar_matcher_free(m);
    FT_LOG_E("out of memory for a grammar matcher");
    return FT_ENOMEM;
}

void ft_grammar_matcher_reset(struct ft_grammar_matcher *m) { set_state(m, m->init_state, m->n_init); }

bool ft_grammar_matcher_complete(const struct ft_grammar_matcher *m) {
    for (int32_t i = 0; i < m->n_state; i++)
        if (m->state[i] == NODE_EMPTY)
            return true;
    return false;
}

bool ft_grammar_matcher_done(const struct ft_grammar_matcher *m) {
    return m->n_state == 0 || (m->n_state == 1 && m->state[0] == NODE_EMPTY);
}

static int fail_log(struct ft_grammar_matcher *m) {
    int rc = m->err ? m->err : FT_ERANGE;
    if (rc == FT_ENOMEM)
        FT_LOG_E("out of memory in the grammar matcher");
    else
        FT_LOG_E("the grammar is too ambiguous: more than %d parses or %d stacks at once", MAX_SET, MAX_NODES);
    return rc;
}

int ft_grammar_matcher_accept_bytes(struct ft_grammar_matcher *m, const char *s, size_t n) {
    if (m->err)
        return fail_log(m);
    /* step into scratch from the state, byte by byte */
    m->scratch_n = 0;
    int32_t off = 0, len = m->n_state;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (first) {
            /* copy the state into scratch so step_set reads one buffer */
            if ((size_t)m->n_state > m->scratch_cap) {
                int32_t *p = realloc(m->scratch, sizeof(int32_t) * (size_t)m->n_state);
                if (!p)
                    return FT_ENOMEM;
                m->scratch = p;
                m->scratch_cap = (size_t)m->n_state;
            }
            memcpy(m->scratch, m->state, sizeof(int32_t) * (size_t)m->n_state);
            m->scratch_n = (size_t)m->n_state;
            first = false;
        }
        int32_t o, l;
        if (step_set(m, NULL, false, off, len, (unsigned char)s[i], &o, &l))
            return fail_log(m);
        if (l == 0)
            return FT_EINVAL;
        /* compact: keep only the newest set */
        memmove(m->scratch, m->scratch + o, sizeof(int32_t) * (size_t)l);
        m->scratch_n = (size_t)l;
        off = 0;
        len = l;
    }
    if (first)
        return FT_OK;
    return set_state(m, m->scratch, len);
}

int ft_grammar_matcher_accept_token(struct ft_grammar_matcher *m, int32_t id) {
    const struct ft_grammar_vocab *v = m->v;
    if (id < 0 || id >= v->n_vocab)
        return FT_EINVAL;
    if ((v->eog_bits[id >> 5] >> (id & 31)) & 1u) {
        if (!ft_grammar_matcher_complete(m))
            return FT_EINVAL;
        const int32_t empty = NODE_EMPTY;
        return set_state(m, &empty, 1);
    }
    uint32_t a = v->tok_off[id], b = v->tok_off[id + 1];
    if (a == b)
        return FT_EINVAL;
    return ft_grammar_matcher_accept_bytes(m, (const char *)v->blob + a, b - a);
}

static uint64_t state_hash(const int32_t *s, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
    return h;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The mask of the current state by walking the trie. */
static int walk(struct ft_grammar_matcher *m) {
    const struct ft_grammar_vocab *v = m->v;
    memset(m->bits, 0, sizeof(uint32_t) * (size_t)m->n_words);
    int32_t allowed = 0;
    /* level 0: the state, copied to scratch[0 ..) */
    if ((size_t)m->n_state > m->scratch_cap) {
        int32_t *p = realloc(m->scratch, sizeof(int32_t) * (size_t)m->n_state);
        if (!p)
            return FT_ENOMEM;
        m->scratch = p;
        m->scratch_cap = (size_t)m->n_state;
    }
    memcpy(m->scratch, m->state, sizeof(int32_t) * (size_t)m->n_state);
    m->lv_off[0] = 0;
    m->lv_len[0] = m->n_state;
    m->lv_pool[0] = false;
    m->lv_scratch_end[0] = (size_t)m->n_state;
    uint64_t walked = 0;
    for (int32_t i = 0; i < v->n_nodes;) {
        const int d = v->depth[i];
        const unsigned c = v->byte[i];
        walked++;
        int32_t o, l;
        bool in_pool;
        if (m->lv_len[d - 1] == 1) {
            int32_t s = m->lv_pool[d - 1] ? m->pool[m->lv_off[d - 1]] : m->scratch[m->lv_off[d - 1]];
            if (step(m, s, c, &o, &l))
                return fail_log(m);
            in_pool = true;
            m->scratch_n = m->lv_scratch_end[d - 1];
        } else {
            m->scratch_n = m->lv_scratch_end[d - 1];
            if (step_set(m, NULL, m->lv_pool[d - 1], m->lv_off[d - 1], m->lv_len[d - 1], c, &o, &l))
                return fail_log(m);
            in_pool = false;
        }
        if (l == 0) {
            i = v->subtree_end[i];
            continue;
        }
        m->lv_off[d] = o;
        m->lv_len[d] = l;
        m->lv_pool[d] = in_pool;
        m->lv_scratch_end[d] = m->scratch_n;
        for (int32_t t = v->tok_start[i]; t < v->tok_start[i + 1]; t++) {
            int32_t id = v->toks[t];
            m->bits[id >> 5] |= 1u << (id & 31);
            allowed++;
        }
        i++;
    }
    if (ft_grammar_matcher_complete(m)) {
        for (int32_t w = 0; w < m->n_words; w++) {
            allowed += __builtin_popcount(v->eog_bits[w]);
            m->bits[w] |= v->eog_bits[w];
        }
    }
    m->n_allowed = allowed;
    m->stats.nodes_walked += walked;
    return FT_OK;
}

int ft_grammar_matcher_mask(struct ft_grammar_matcher *m, const uint32_t **bits, int32_t *n_allowed) {
    if (m->err)
        return fail_log(m);
    const uint64_t t0 = ft_clock_ticks();
    m->stats.masks++;
    if (!m->bits_valid) {
        /* the cache key is the sorted state */
        int32_t key[MAX_SET];
        int32_t n = FT_MIN(m->n_state, MAX_SET);
        memcpy(key, m->state, sizeof(int32_t) * (size_t)n);
        qsort(key, (size_t)n, sizeof(int32_t), cmp_i32);
        uint64_t h = state_hash(key, n);
        struct mcache *hit = NULL, *lru = &m->cache[0];
        for (int i = 0; i < MASK_CACHE; i++) {
            struct mcache *c = &m->cache[i];
            if (c->bits && c->hash == h && c->n_state == n && !memcmp(c->state, key, sizeof(int32_t) * (size_t)n)) {
                hit = c;
                break;
            }
            if (!c->bits || c->used < lru->used)
                lru = c;
        }
        if (hit) {
            memcpy(m->bits, hit->bits, sizeof(uint32_t) * (size_t)m->n_words);
            m->n_allowed = hit->n_allowed;
            hit->used = ++m->use_clock;
            m->stats.mask_hits++;
        } else {
            int rc = walk(m);
            if (rc)
                return rc;
            if (!lru->bits && !(lru->bits = malloc(sizeof(uint32_t) * (size_t)m->n_words)))
                return FT_ENOMEM;
            int32_t *st = realloc(lru->state, sizeof(int32_t) * (size_t)FT_MAX(n, 1));
            if (!st)
                return FT_ENOMEM;
            lru->state = st;
            memcpy(lru->state, key, sizeof(int32_t) * (size_t)n);
            lru->n_state = n;
            lru->hash = h;
            memcpy(lru->bits, m->bits, sizeof(uint32_t) * (size_t)m->n_words);
            lru->n_allowed = m->n_allowed;
            lru->used = ++m->use_clock;
        }
        m->bits_valid = true;
    }
    *bits = m->bits;
    if (n_allowed)
        *n_allowed = m->n_allowed;
    m->stats.mask_ns += (uint64_t)ft_clock_ticks_to_ns(ft_clock_ticks() - t0);
    return FT_OK;
}

int ft_grammar_matcher_apply(struct ft_grammar_matcher *m, float *logits, int32_t *n_allowed) {
    const uint32_t *bits;
    int rc = ft_grammar_matcher_mask(m, &bits, n_allowed);
    if (rc)
        return rc;
    const int32_t nv = m->v->n_vocab;
    for (int32_t w = 0; w < m->n_words; w++) {
        uint32_t b = bits[w];
        if (b == 0xffffffffu)
            continue;
        const int32_t base = w * 32, end = FT_MIN(base + 32, nv);
        for (int32_t i = base; i < end; i++)
            if (!((b >> (i - base)) & 1u))
                logits[i] = -INFINITY;
    }
    return FT_OK;
}

void ft_grammar_matcher_stats(const struct ft_grammar_matcher *m, struct ft_grammar_stats *out) { *out = m->stats; }
