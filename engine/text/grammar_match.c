/* The token trie of a vocabulary and the grammar matcher that walks it
 * (engine/include/ft/grammar.h).
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
#define MASK_CACHE 128      /* masks kept per matcher (32 KiB each for 262k tokens) */
#define DTAB_MAX 4096       /* nodes with a direct step table (2 KiB each) */
#define MAX_SETS (1 << 20)  /* distinct parse states one request may reach */
#define SDT_MAX 16384       /* sets with a successor table (1 KiB each) */
#define MAX_POOL (1 << 24)  /* node ids held by memoized steps and interned sets */
/* Slow-path work (expansion steps, union entries) one call may do: a
 * grammar built to be expensive ends the request instead of stalling the
 * scheduler thread. JSON Schema grammars use a tiny fraction of it. */
#define WORK_BUDGET 20000000

struct gnode {
    int32_t pos, parent, hnext;
    uint32_t mark;  /* expansion: visited / emitted in this epoch */
    uint32_t mark2; /* set unions */
};

struct memo {
    int64_t key; /* node * 256 + byte, -1 empty */
    int32_t off, len;
};

struct sset {
    int32_t off, len; /* sorted node ids in set_pool */
    int32_t hnext;
    uint32_t hash;
    bool complete;    /* holds EMPTY */
};

struct mslot {
    int32_t sid; /* the set this slot holds the mask of, -1 free */
    int32_t n_allowed;
    uint64_t used;
    uint32_t *bits;
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
    /* per-node direct tables over the 256 bytes in front of the memo,
     * (off << 32 | len), -1 unknown; at most DTAB_MAX nodes get one */
    int64_t **dtab;
    int32_t cap_dtab, n_dtab_alloc;
    int32_t *pool; /* memoized node step results */
    size_t pool_n, pool_cap;
    int32_t *work; /* expansion work list: (pos, parent) pairs */
    size_t work_cap;
    int32_t *out;  /* expansion output */
    int32_t n_out, cap_out;
    /* Parse states (sets of stacks) are interned too, and stepping a set by a
     * byte is a table lookup: a lazily built DFA over the pushdown states
     * the input has reached. Set 0 is the empty set (rejection). */
    struct sset *sets;
    int32_t n_sets, cap_sets;
    int32_t *set_buckets;
    uint32_t n_set_buckets;
    int32_t *set_pool;
    size_t set_pool_n, set_pool_cap;
    int32_t **sdt;   /* (cap_sets) per set: 256 successor sets, -1 unknown; NULL: none yet */
    int32_t n_sdt;
    int32_t *uni;    /* scratch for a union */
    int32_t cap_uni;
    int32_t sid, init_sid;
    int32_t *lv;     /* (max_depth + 1) the set at each trie depth */
    int32_t n_words;
    uint32_t *bits;
    int32_t n_allowed;
    bool bits_valid;
    int32_t *slot_of; /* (cap_sets) mask slot of a set, -1 none */
    struct mslot cache[MASK_CACHE];
    uint64_t use_clock;
    struct ft_grammar_stats stats;
    uint64_t spent; /* slow-path work in this call (WORK_BUDGET) */
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
            if (++m->spent > WORK_BUDGET) {
                m->err = FT_ERANGE;
                return -1;
            }
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

static int step_memo(struct ft_grammar_matcher *m, int32_t node, unsigned c, int32_t *off, int32_t *len);

/* The stacks after `node` reads `c`: a slice of m->pool (off, len). */
static inline int step(struct ft_grammar_matcher *m, int32_t node, unsigned c, int32_t *off, int32_t *len) {
    if (node < m->cap_dtab && m->dtab[node]) {
        int64_t e = m->dtab[node][c];
        if (e >= 0) {
            *off = (int32_t)(e >> 32);
            *len = (int32_t)(e & 0xffffffff);
            return 0;
        }
    }
    if (step_memo(m, node, c, off, len))
        return -1;
    if (node >= m->cap_dtab) {
        int32_t cap = FT_MAX(node + 1, m->cap_dtab * 2);
        int64_t **p = realloc(m->dtab, sizeof(*p) * (size_t)cap);
        if (!p)
            return 0; /* the memo still answers */
        memset(p + m->cap_dtab, 0, sizeof(*p) * (size_t)(cap - m->cap_dtab));
        m->dtab = p;
        m->cap_dtab = cap;
    }
    if (!m->dtab[node]) {
        if (m->n_dtab_alloc >= DTAB_MAX || !(m->dtab[node] = malloc(sizeof(int64_t) * 256)))
            return 0;
        memset(m->dtab[node], 0xff, sizeof(int64_t) * 256);
        m->n_dtab_alloc++;
    }
    m->dtab[node][c] = ((int64_t)*off << 32) | (uint32_t)*len;
    return 0;
}

static int step_memo(struct ft_grammar_matcher *m, int32_t node, unsigned c, int32_t *off, int32_t *len) {
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
    if (m->pool_n > MAX_POOL) {
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

static uint32_t set_hash_ids(const int32_t *x, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)x[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

static void sort_ids(int32_t *x, int32_t n) {
    for (int32_t i = 1; i < n; i++)
        for (int32_t j = i; j > 0 && x[j] < x[j - 1]; j--) {
            int32_t t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
}

/* The id of the set x[0..n) (sorted in place), or -1 with m->err. */
static int32_t intern_set(struct ft_grammar_matcher *m, int32_t *x, int32_t n) {
    if (n > 1)
        sort_ids(x, n);
    uint32_t h = set_hash_ids(x, n);
    for (int32_t i = m->set_buckets[h & (m->n_set_buckets - 1)]; i >= 0; i = m->sets[i].hnext)
        if (m->sets[i].hash == h && m->sets[i].len == n &&
            (n == 0 || !memcmp(m->set_pool + m->sets[i].off, x, sizeof(int32_t) * (size_t)n)))
            return i;
    if (m->n_sets >= MAX_SETS) {
        m->err = FT_ERANGE;
        return -1;
    }
    if (m->n_sets == m->cap_sets) {
        int32_t cap = m->cap_sets * 2;
        struct sset *ns = realloc(m->sets, sizeof(*ns) * (size_t)cap);
        if (ns)
            m->sets = ns;
        int32_t **nd = realloc(m->sdt, sizeof(*nd) * (size_t)cap);
        if (nd) {
            memset(nd + m->cap_sets, 0, sizeof(*nd) * (size_t)(cap - m->cap_sets));
            m->sdt = nd;
        }
        int32_t *so = realloc(m->slot_of, sizeof(int32_t) * (size_t)cap);
        if (so) {
            memset(so + m->cap_sets, 0xff, sizeof(int32_t) * (size_t)(cap - m->cap_sets));
            m->slot_of = so;
        }
        if (!ns || !nd || !so) {
            m->err = FT_ENOMEM;
            return -1;
        }
        m->cap_sets = cap;
    }
    if ((uint32_t)m->n_sets >= m->n_set_buckets) {
        uint32_t nb = m->n_set_buckets * 2;
        int32_t *b = malloc(sizeof(int32_t) * nb);
        if (!b) {
            m->err = FT_ENOMEM;
            return -1;
        }
        memset(b, 0xff, sizeof(int32_t) * nb);
        for (int32_t i = 0; i < m->n_sets; i++) {
            m->sets[i].hnext = b[m->sets[i].hash & (nb - 1)];
            b[m->sets[i].hash & (nb - 1)] = i;
        }
        free(m->set_buckets);
        m->set_buckets = b;
        m->n_set_buckets = nb;
    }
    if (m->set_pool_n + (size_t)n > MAX_POOL) {
        m->err = FT_ERANGE;
        return -1;
    }
    if (m->set_pool_n + (size_t)n > m->set_pool_cap) {
        size_t cap = m->set_pool_cap * 2 + (size_t)n;
        int32_t *p = realloc(m->set_pool, sizeof(int32_t) * cap);
        if (!p) {
            m->err = FT_ENOMEM;
            return -1;
        }
        m->set_pool = p;
        m->set_pool_cap = cap;
    }
    int32_t id = m->n_sets++;
    bool complete = false;
    for (int32_t i = 0; i < n; i++)
        complete |= x[i] == NODE_EMPTY;
    if (n)
        memcpy(m->set_pool + m->set_pool_n, x, sizeof(int32_t) * (size_t)n);
    m->sets[id] = (struct sset){(int32_t)m->set_pool_n, n, m->set_buckets[h & (m->n_set_buckets - 1)], h, complete};
    m->set_buckets[h & (m->n_set_buckets - 1)] = id;
    m->set_pool_n += (size_t)n;
    return id;
}

/* The set after set `sid` reads c (0: rejected), or -1 with m->err. */
static int32_t step_sid(struct ft_grammar_matcher *m, int32_t sid, unsigned c) {
    if (m->sdt[sid] && m->sdt[sid][c] >= 0)
        return m->sdt[sid][c];
    m->epoch2++;
    int32_t n = 0;
    for (int32_t i = 0; i < m->sets[sid].len; i++) {
        int32_t o, l;
        if (step(m, m->set_pool[m->sets[sid].off + i], c, &o, &l))
            return -1;
        if (n + l > m->cap_uni) {
            int32_t cap = (n + l) * 2 + 16;
            int32_t *p = realloc(m->uni, sizeof(int32_t) * (size_t)cap);
            if (!p) {
                m->err = FT_ENOMEM;
                return -1;
            }
            m->uni = p;
            m->cap_uni = cap;
        }
        if ((m->spent += (uint64_t)l) > WORK_BUDGET) {
            m->err = FT_ERANGE;
            return -1;
        }
        for (int32_t j = 0; j < l; j++) {
            int32_t t = m->pool[o + j];
            if (m->nodes[t].mark2 == m->epoch2)
                continue;
            m->nodes[t].mark2 = m->epoch2;
            m->uni[n++] = t;
        }
        if (n > MAX_SET) {
            m->err = FT_ERANGE;
            return -1;
        }
    }
    int32_t r = intern_set(m, m->uni, n);
    if (r < 0)
        return -1;
    if (!m->sdt[sid] && m->n_sdt < SDT_MAX && (m->sdt[sid] = malloc(sizeof(int32_t) * 256))) {
        memset(m->sdt[sid], 0xff, sizeof(int32_t) * 256);
        m->n_sdt++;
    }
    if (m->sdt[sid])
        m->sdt[sid][c] = r;
    return r;
}

void ft_grammar_matcher_free(struct ft_grammar_matcher *m) {
    if (!m)
        return;
    free(m->nodes);
    free(m->buckets);
    free(m->memo);
    for (int32_t i = 0; i < m->cap_dtab; i++)
        free(m->dtab[i]);
    free(m->dtab);
    free(m->pool);
    free(m->work);
    free(m->out);
    free(m->sets);
    free(m->set_buckets);
    free(m->set_pool);
    for (int32_t i = 0; m->sdt && i < m->cap_sets; i++)
        free(m->sdt[i]);
    free(m->sdt);
    free(m->slot_of);
    free(m->uni);
    free(m->lv);
    free(m->bits);
    for (int i = 0; i < MASK_CACHE; i++)
        free(m->cache[i].bits);
    free(m);
}

static void set_sid(struct ft_grammar_matcher *m, int32_t sid) {
    if (m->sid != sid)
        m->bits_valid = false;
    m->sid = sid;
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
    m->cap_sets = 256;
    m->n_set_buckets = 256;
    m->set_pool_cap = 4096;
    m->n_words = (v->n_vocab + 31) / 32;
    m->nodes = malloc(sizeof(*m->nodes) * (size_t)m->cap_nodes);
    m->buckets = malloc(sizeof(int32_t) * m->n_buckets);
    m->work = malloc(sizeof(int32_t) * m->work_cap);
    m->pool = malloc(sizeof(int32_t) * m->pool_cap);
    m->sets = malloc(sizeof(*m->sets) * (size_t)m->cap_sets);
    m->set_buckets = malloc(sizeof(int32_t) * m->n_set_buckets);
    m->set_pool = malloc(sizeof(int32_t) * m->set_pool_cap);
    m->sdt = calloc((size_t)m->cap_sets, sizeof(*m->sdt));
    m->slot_of = malloc(sizeof(int32_t) * (size_t)m->cap_sets);
    m->lv = malloc(sizeof(int32_t) * ((size_t)v->max_depth + 1));
    m->bits = malloc(sizeof(uint32_t) * (size_t)m->n_words);
    if (!m->nodes || !m->buckets || !m->work || !m->pool || !m->sets || !m->set_buckets || !m->set_pool ||
        !m->sdt || !m->slot_of || !m->lv || !m->bits || memo_grow(m))
        goto oom;
    memset(m->buckets, 0xff, sizeof(int32_t) * m->n_buckets);
    memset(m->set_buckets, 0xff, sizeof(int32_t) * m->n_set_buckets);
    memset(m->slot_of, 0xff, sizeof(int32_t) * (size_t)m->cap_sets);
    for (int i = 0; i < MASK_CACHE; i++)
        m->cache[i].sid = -1;
    m->nodes[0] = (struct gnode){-1, -1, -1, 0, 0}; /* EMPTY: never in a bucket */
    m->n_nodes = 1;
    m->epoch = 1;
    if (intern_set(m, NULL, 0) != 0) /* set 0: rejection */
        goto fail;
    m->n_out = 0;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (expand(m, g->alt_start[a], NODE_EMPTY))
            goto fail;
    if ((m->init_sid = intern_set(m, m->out, m->n_out)) < 0)
        goto fail;
    m->sid = m->init_sid;
    *out = m;
    return FT_OK;
fail:
    if (m->err != FT_ENOMEM) {
        int rc = m->err ? m->err : FT_ERANGE;
        ft_grammar_matcher_free(m);
        FT_LOG_E("the grammar is too ambiguous: more than %d parses at its start", MAX_SET);
        return rc;
    }
oom:
    ft_grammar_matcher_free(m);
    FT_LOG_E("out of memory for a grammar matcher");
    return FT_ENOMEM;
}

const struct ft_grammar_vocab *ft_grammar_matcher_vocab(const struct ft_grammar_matcher *m) { return m->v; }

void ft_grammar_matcher_reset(struct ft_grammar_matcher *m) { set_sid(m, m->init_sid); }

bool ft_grammar_matcher_complete(const struct ft_grammar_matcher *m) { return m->sets[m->sid].complete; }

bool ft_grammar_matcher_done(const struct ft_grammar_matcher *m) {
    const struct sset *s = &m->sets[m->sid];
    return s->len == 0 || (s->len == 1 && m->set_pool[s->off] == NODE_EMPTY);
}

static int fail_log(struct ft_grammar_matcher *m) {
    int rc = m->err ? m->err : FT_ERANGE;
    if (rc == FT_ENOMEM)
        FT_LOG_E("out of memory in the grammar matcher");
    else
        FT_LOG_E("the grammar is too ambiguous or too costly to match: more than %d parses, %d stacks, %d states "
                 "or %d steps of work for one token", MAX_SET, MAX_NODES, MAX_SETS, WORK_BUDGET);
    return rc;
}

int ft_grammar_matcher_accept_bytes(struct ft_grammar_matcher *m, const char *s, size_t n) {
    if (m->err)
        return fail_log(m);
    m->spent = 0;
    int32_t sid = m->sid;
    for (size_t i = 0; i < n; i++) {
        sid = step_sid(m, sid, (unsigned char)s[i]);
        if (sid < 0)
            return fail_log(m);
        if (sid == 0)
            return FT_EINVAL;
    }
    set_sid(m, sid);
    return FT_OK;
}

int ft_grammar_matcher_accept_token(struct ft_grammar_matcher *m, int32_t id) {
    const struct ft_grammar_vocab *v = m->v;
    if (id < 0 || id >= v->n_vocab)
        return FT_EINVAL;
    if ((v->eog_bits[id >> 5] >> (id & 31)) & 1u) {
        if (!ft_grammar_matcher_complete(m))
            return FT_EINVAL;
        int32_t empty = NODE_EMPTY;
        int32_t sid = intern_set(m, &empty, 1);
        if (sid < 0)
            return fail_log(m);
        set_sid(m, sid);
        return FT_OK;
    }
    uint32_t a = v->tok_off[id], b = v->tok_off[id + 1];
    if (a == b)
        return FT_EINVAL;
    return ft_grammar_matcher_accept_bytes(m, (const char *)v->blob + a, b - a);
}

/* The mask of the current state: the trie in preorder, one set per depth,
 * each step a table lookup once the DFA has seen it. */
static int walk(struct ft_grammar_matcher *m) {
    const struct ft_grammar_vocab *v = m->v;
    memset(m->bits, 0, sizeof(uint32_t) * (size_t)m->n_words);
    int32_t allowed = 0;
    int32_t *lv = m->lv;
    lv[0] = m->sid;
    uint64_t walked = 0;
    const uint8_t *depth = v->depth, *byte = v->byte;
    const int32_t *tok_start = v->tok_start, *subtree_end = v->subtree_end;
    for (int32_t i = 0; i < v->n_nodes;) {
        const int d = depth[i];
        const int32_t s = lv[d - 1];
        walked++;
        int32_t r = m->sdt[s] ? m->sdt[s][byte[i]] : -1;
        if (r < 0 && (r = step_sid(m, s, byte[i])) < 0)
            return fail_log(m);
        if (r == 0) {
            i = subtree_end[i];
            continue;
        }
        lv[d] = r;
        for (int32_t t = tok_start[i]; t < tok_start[i + 1]; t++) {
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
    m->spent = 0;
    if (!m->bits_valid) {
        int32_t slot = m->slot_of[m->sid];
        if (slot >= 0) {
            struct mslot *c = &m->cache[slot];
            memcpy(m->bits, c->bits, sizeof(uint32_t) * (size_t)m->n_words);
            m->n_allowed = c->n_allowed;
            c->used = ++m->use_clock;
            m->stats.mask_hits++;
        } else {
            int rc = walk(m);
            if (rc)
                return rc;
            int lru = 0;
            for (int i = 1; i < MASK_CACHE; i++)
                if (m->cache[i].used < m->cache[lru].used)
                    lru = i;
            struct mslot *c = &m->cache[lru];
            if (!c->bits && !(c->bits = malloc(sizeof(uint32_t) * (size_t)m->n_words)))
                return FT_ENOMEM;
            if (c->sid >= 0)
                m->slot_of[c->sid] = -1;
            c->sid = m->sid;
            m->slot_of[m->sid] = lru;
            memcpy(c->bits, m->bits, sizeof(uint32_t) * (size_t)m->n_words);
            c->n_allowed = m->n_allowed;
            c->used = ++m->use_clock;
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
