/* The grammar builder, flattening with the checks that keep matching finite
 * (undefined rules, left recursion), UTF-8 code point classes as byte
 * sequences, and llama.cpp's GBNF syntax on top of them.
 * (engine/text/grammar_internal.h describes the representation.) */
#include "grammar_internal.h"

#include "ft/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- builder ------------------------------------------------------------ */

void gb_init(struct gbuild *b, char *err, size_t err_cap) {
    memset(b, 0, sizeof(*b));
    b->err = err;
    b->err_cap = err_cap;
    if (err && err_cap)
        err[0] = '\0';
}

void gb_free(struct gbuild *b) {
    if (!b)
        return;
    for (int32_t i = 0; i < b->n_rules; i++) {
        free(b->rules[i].el);
        free(b->rules[i].name);
    }
    free(b->rules);
    free(b->sets);
    free(b->set_hash);
    memset(b, 0, sizeof(*b));
}

int gb_fail(struct gbuild *b, int rc, const char *fmt, ...) {
    if (b->rc)
        return -1;
    b->rc = rc;
    if (b->err && b->err_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->err_cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void *grow(void *p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap)
        return p;
    int32_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    void *q = realloc(p, (size_t)c * elem);
    if (q)
        *cap = c;
    return q;
}

int32_t gb_rule(struct gbuild *b, const char *name) {
    if (b->rc)
        return -1;
    if (b->n_rules >= (int32_t)FT_GRAMMAR_MAX_RULES)
        return gb_fail(b, FT_ERANGE, "the grammar needs more than %u rules", FT_GRAMMAR_MAX_RULES);
    struct gb_rule *r = grow(b->rules, &b->cap_rules, b->n_rules + 1, sizeof(*r));
    if (!r)
        return gb_fail(b, FT_ENOMEM, "out of memory");
    b->rules = r;
    struct gb_rule *nr = &b->rules[b->n_rules];
    memset(nr, 0, sizeof(*nr));
    if (name && !(nr->name = strdup(name)))
        return gb_fail(b, FT_ENOMEM, "out of memory");
    nr->defined = name == NULL;
    return b->n_rules++;
}

static void push_elem(struct gbuild *b, int32_t rule, uint32_t e) {
    if (b->rc)
        return;
    if (rule < 0 || rule >= b->n_rules) {
        gb_fail(b, FT_EINVAL, "internal: bad rule %d", (int)rule);
        return;
    }
    if (++b->n_elems > FT_GRAMMAR_MAX_ELEMS) {
        gb_fail(b, FT_ERANGE, "the grammar needs more than %u elements", FT_GRAMMAR_MAX_ELEMS);
        return;
    }
    struct gb_rule *r = &b->rules[rule];
    uint32_t *p = grow(r->el, &r->cap, r->n + 1, sizeof(uint32_t));
    if (!p) {
        gb_fail(b, FT_ENOMEM, "out of memory");
        return;
    }
    r->el = p;
    r->el[r->n++] = e;
}

void gb_alt(struct gbuild *b, int32_t rule) { push_elem(b, rule, GE_MAKE(GE_ALT, 0)); }

static uint32_t set_hash(const struct ft_grammar_set *s) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 8; i++)
        h = (h ^ s->w[i]) * 16777619u;
    return h;
}

/* Identical classes share one entry (JSON grammars repeat a few classes). */
static int32_t intern_set(struct gbuild *b, const struct ft_grammar_set *s) {
    if (b->rc)
        return -1;
    if (b->n_sets * 2 >= b->set_hash_cap) {
        int32_t cap = b->set_hash_cap ? b->set_hash_cap * 2 : 64;
        int32_t *h = malloc(sizeof(int32_t) * (size_t)cap);
        if (!h)
            return gb_fail(b, FT_ENOMEM, "out of memory");
        memset(h, 0xff, sizeof(int32_t) * (size_t)cap);
        for (int32_t i = 0; i < b->n_sets; i++) {
            uint32_t k = set_hash(&b->sets[i]) & (uint32_t)(cap - 1);
            while (h[k] >= 0)
                k = (k + 1) & (uint32_t)(cap - 1);
            h[k] = i;
        }
        free(b->set_hash);
        b->set_hash = h;
        b->set_hash_cap = cap;
    }
    uint32_t k = set_hash(s) & (uint32_t)(b->set_hash_cap - 1);
    while (b->set_hash[k] >= 0) {
        if (!memcmp(&b->sets[b->set_hash[k]], s, sizeof(*s)))
            return b->set_hash[k];
        k = (k + 1) & (uint32_t)(b->set_hash_cap - 1);
    }
    struct ft_grammar_set *p = grow(b->sets, &b->cap_sets, b->n_sets + 1, sizeof(*p));
    if (!p)
        return gb_fail(b, FT_ENOMEM, "out of memory");
    b->sets = p;
    b->sets[b->n_sets] = *s;
    b->set_hash[k] = b->n_sets;
    return b->n_sets++;
}

void gb_set(struct gbuild *b, int32_t rule, const struct ft_grammar_set *s) {
    int32_t id = intern_set(b, s);
    if (id >= 0)
        push_elem(b, rule, GE_MAKE(GE_CHARS, id));
}

void gb_byte(struct gbuild *b, int32_t rule, unsigned char c) {
    struct ft_grammar_set s = {{0}};
    gset_add(&s, c);
    gb_set(b, rule, &s);
}

void gb_lit(struct gbuild *b, int32_t rule, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        gb_byte(b, rule, (unsigned char)s[i]);
}

void gb_ref(struct gbuild *b, int32_t rule, int32_t target) {
    if (target < 0) {
        gb_fail(b, FT_EINVAL, "internal: bad rule reference");
        return;
    }
    push_elem(b, rule, GE_MAKE(GE_RULE, target));
}

/* ---- UTF-8 ---------------------------------------------------------------- */

static int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

static int utf8_encode(uint32_t c, unsigned char *o) {
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xc0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (c & 0x3f));
    return 4;
}

/* Russ Cox's utf8ranges: split [lo, hi] (same encoded length, no surrogates)
 * until every byte position is one contiguous range, and add each piece as
 * an alternative of `rule` (single bytes go to *ascii instead). */
static void utf8_pieces(struct gbuild *b, int32_t rule, bool *first, struct ft_grammar_set *ascii, uint32_t lo,
                        uint32_t hi, int depth) {
    if (b->rc || depth > 16)
        return;
    int n = utf8_len(lo);
    if (n == 1) {
        gset_add_range(ascii, lo, hi);
        return;
    }
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_pieces(b, rule, first, ascii, lo, lo | m, depth + 1);
                utf8_pieces(b, rule, first, ascii, (lo | m) + 1, hi, depth + 1);
                return;
            }
            if ((hi & m) != m) {
                utf8_pieces(b, rule, first, ascii, lo, (hi & ~m) - 1, depth + 1);
                utf8_pieces(b, rule, first, ascii, hi & ~m, hi, depth + 1);
                return;
            }
        }
    }
    unsigned char a[4], z[4];
    utf8_encode(lo, a);
    utf8_encode(hi, z);
    if (!*first)
        gb_alt(b, rule);
    *first = false;
    for (int i = 0; i < n; i++) {
        struct ft_grammar_set s = {{0}};
        gset_add_range(&s, a[i], z[i]);
        gb_set(b, rule, &s);
    }
}

void gb_utf8_range(struct gbuild *b, int32_t rule, const uint32_t *ranges, int n_ranges) {
    struct ft_grammar_set ascii = {{0}};
    bool multi = false;
    for (int i = 0; i < n_ranges; i++)
        if (ranges[2 * i + 1] >= 0x80 && ranges[2 * i] <= ranges[2 * i + 1])
            multi = true;
    if (!multi) {
        for (int i = 0; i < n_ranges; i++)
            if (ranges[2 * i] <= ranges[2 * i + 1])
                gset_add_range(&ascii, ranges[2 * i], ranges[2 * i + 1]);
        gb_set(b, rule, &ascii);
        return;
    }
    int32_t r = gb_rule(b, NULL);
    if (r < 0)
        return;
    bool first = true;
    static const uint32_t bounds[][2] = {{0, 0x7f}, {0x80, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xffff}, {0x10000, 0x10ffff}};
    for (int i = 0; i < n_ranges; i++) {
        for (size_t k = 0; k < FT_ARRAY_LEN(bounds); k++) {
            uint32_t lo = FT_MAX(ranges[2 * i], bounds[k][0]), hi = FT_MIN(ranges[2 * i + 1], bounds[k][1]);
            if (lo <= hi)
                utf8_pieces(b, r, &first, &ascii, lo, hi, 0);
        }
    }
    bool any_ascii = false;
    for (int i = 0; i < 8; i++)
        any_ascii |= ascii.w[i] != 0;
    if (any_ascii) {
        if (!first)
            gb_alt(b, r);
        gb_set(b, r, &ascii);
    }
    gb_ref(b, rule, r);
}

int32_t gb_repeat(struct gbuild *b, int32_t x, int32_t min, int32_t max) {
    if (b->rc)
        return -1;
    if (min < 0 || min > FT_GRAMMAR_MAX_REPEAT || (max >= 0 && (max < min || max > FT_GRAMMAR_MAX_REPEAT)))
        return gb_fail(b, FT_ERANGE, "a repetition {%d,%d} is outside 0..%d", (int)min, (int)max,
                       FT_GRAMMAR_MAX_REPEAT);
    int32_t r = gb_rule(b, NULL);
    for (int32_t i = 0; i < min; i++)
        gb_ref(b, r, x);
    int32_t tail = -1;
    if (max < 0) {
        /* star ::= x star | ε  (a tail call: the stack does not grow) */
        tail = gb_rule(b, NULL);
        gb_ref(b, tail, x);
        gb_ref(b, tail, tail);
        gb_alt(b, tail);
    } else {
        /* opt_k ::= x opt_{k-1} | ε */
        for (int32_t k = 0; k < max - min; k++) {
            int32_t o = gb_rule(b, NULL);
            gb_ref(b, o, x);
            if (tail >= 0)
                gb_ref(b, o, tail);
            gb_alt(b, o);
            tail = o;
        }
    }
    if (tail >= 0)
        gb_ref(b, r, tail);
    return b->rc ? -1 : r;
}

/* ---- flattening and checks ------------------------------------------------- */

static const char *rule_label(const struct gbuild *b, int32_t r, char *buf, size_t cap) {
    if (b->rules[r].name)
        snprintf(buf, cap, "'%.60s'", b->rules[r].name);
    else
        snprintf(buf, cap, "#%d", (int)r);
    return buf;
}

/* Nullable rules by a worklist (linear), then a depth-first search for a
 * cycle through leftmost references: left recursion would make the matcher
 * push forever. */
static int check_left_recursion(struct gbuild *b, const struct ft_grammar *g) {
    const int32_t nr = g->n_rules, na = g->rule_alt[nr];
    int rc = FT_ENOMEM;
    bool *nullable = calloc((size_t)nr, sizeof(bool));
    int32_t *cnt = calloc((size_t)na, sizeof(int32_t));
    int32_t *alt_rule = malloc(sizeof(int32_t) * (size_t)na);
    int32_t *occ_start = calloc((size_t)nr + 1, sizeof(int32_t));
    int32_t *occ = NULL, *queue = malloc(sizeof(int32_t) * (size_t)nr), *fill = NULL;
    int32_t *stack = NULL, *edge_i = NULL;
    uint8_t *color = NULL;
    if (!nullable || !cnt || !alt_rule || !occ_start || !queue)
        goto done;
    for (int32_t r = 0; r < nr; r++)
        for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            alt_rule[a] = r;
            for (int32_t p = g->alt_start[a]; GE_KIND(g->elems[p]) == GE_CHARS || GE_KIND(g->elems[p]) == GE_RULE; p++) {
                if (GE_KIND(g->elems[p]) == GE_CHARS) {
                    cnt[a] = -1; /* never nullable */
                    break;
                }
                cnt[a]++;
            }
        }
    for (int32_t a = 0; a < na; a++)
        for (int32_t p = g->alt_start[a]; cnt[a] >= 0 && GE_KIND(g->elems[p]) == GE_RULE; p++)
            occ_start[GE_ARG(g->elems[p]) + 1]++;
    for (int32_t r = 0; r < nr; r++)
        occ_start[r + 1] += occ_start[r];
    if (!(occ = malloc(sizeof(int32_t) * (size_t)(occ_start[nr] + 1))) ||
        !(fill = malloc(sizeof(int32_t) * (size_t)nr)))
        goto done;
    memcpy(fill, occ_start, sizeof(int32_t) * (size_t)nr);
    for (int32_t a = 0; a < na; a++) {
        if (cnt[a] < 0)
            continue;
        for (int32_t p = g->alt_start[a]; GE_KIND(g->elems[p]) == GE_RULE; p++)
            occ[fill[GE_ARG(g->elems[p])]++] = a;
    }
    int32_t qh = 0, qt = 0;
    for (int32_t a = 0; a < na; a++)
        if (cnt[a] == 0 && !nullable[alt_rule[a]]) {
            nullable[alt_rule[a]] = true;
            queue[qt++] = alt_rule[a];
        }
    while (qh < qt) {
        int32_t r = queue[qh++];
        for (int32_t k = occ_start[r]; k < occ_start[r + 1]; k++) {
            int32_t a = occ[k];
            if (--cnt[a] == 0 && !nullable[alt_rule[a]]) {
                nullable[alt_rule[a]] = true;
                queue[qt++] = alt_rule[a];
            }
        }
    }
    /* Productive rules (derive some finite byte string), by the same
     * worklist with byte classes counting as done: a root that is not
     * productive matches nothing and would leave the sampler no token. */
    {
        bool *prod = calloc((size_t)nr, sizeof(bool));
        int32_t *cnt2 = calloc((size_t)na, sizeof(int32_t));
        int32_t *occ2_start = calloc((size_t)nr + 1, sizeof(int32_t));
        int32_t *occ2 = NULL;
        bool ok = prod && cnt2 && occ2_start;
        for (int32_t a = 0; ok && a < na; a++)
            for (int32_t p = g->alt_start[a]; GE_KIND(g->elems[p]) == GE_CHARS || GE_KIND(g->elems[p]) == GE_RULE; p++)
                if (GE_KIND(g->elems[p]) == GE_RULE) {
                    cnt2[a]++;
                    occ2_start[GE_ARG(g->elems[p]) + 1]++;
                }
        for (int32_t r = 0; ok && r < nr; r++)
            occ2_start[r + 1] += occ2_start[r];
        ok = ok && (occ2 = malloc(sizeof(int32_t) * (size_t)(occ2_start[nr] + 1))) != NULL;
        if (ok) {
            memcpy(fill, occ2_start, sizeof(int32_t) * (size_t)nr);
            for (int32_t a = 0; a < na; a++)
                for (int32_t p = g->alt_start[a]; GE_KIND(g->elems[p]) == GE_CHARS || GE_KIND(g->elems[p]) == GE_RULE; p++)
                    if (GE_KIND(g->elems[p]) == GE_RULE)
                        occ2[fill[GE_ARG(g->elems[p])]++] = a;
            qh = qt = 0;
            for (int32_t a = 0; a < na; a++)
                if (cnt2[a] == 0 && !prod[alt_rule[a]]) {
                    prod[alt_rule[a]] = true;
                    queue[qt++] = alt_rule[a];
                }
            while (qh < qt) {
                int32_t r = queue[qh++];
                for (int32_t k = occ2_start[r]; k < occ2_start[r + 1]; k++) {
                    int32_t a = occ2[k];
                    if (--cnt2[a] == 0 && !prod[alt_rule[a]]) {
                        prod[alt_rule[a]] = true;
                        queue[qt++] = alt_rule[a];
                    }
                }
            }
        }
        bool root_ok = ok && prod[g->root];
        free(prod);
        free(cnt2);
        free(occ2_start);
        free(occ2);
        if (!ok)
            goto done;
        if (!root_ok) {
            rc = FT_EINVAL;
            gb_fail(b, FT_EINVAL, "the grammar matches no input at all (its root never ends)");
            goto done;
        }
    }
    /* Leftmost edges r -> s (s can be the first thing r reads). A cycle of
     * them is harmless when every edge on it is a tail call (the reference
     * ends its alternative: the matcher reuses the parent, and the visited
     * marks end the expansion), and fatal otherwise (each round pushes a new
     * continuation). So: strongly connected components (Kosaraju, iterative),
     * then refuse a non-tail edge inside one. */
    int32_t n_edges = 0;
    for (int32_t a = 0; a < na; a++)
        for (int32_t p = g->alt_start[a]; GE_KIND(g->elems[p]) == GE_RULE; p++) {
            n_edges++;
            if (!nullable[GE_ARG(g->elems[p])])
                break;
        }
    color = calloc((size_t)nr, 1);
    stack = malloc(sizeof(int32_t) * (size_t)nr);
    edge_i = malloc(sizeof(int32_t) * (size_t)nr);
    int32_t *adj = malloc(sizeof(int32_t) * (size_t)(n_edges + 1));
    uint8_t *tail = malloc((size_t)n_edges + 1);
    int32_t *adj_start = calloc((size_t)nr + 1, sizeof(int32_t));
    int32_t *radj = malloc(sizeof(int32_t) * (size_t)(n_edges + 1));
    int32_t *radj_start = calloc((size_t)nr + 2, sizeof(int32_t));
    int32_t *order = malloc(sizeof(int32_t) * (size_t)nr);
    int32_t *comp = malloc(sizeof(int32_t) * (size_t)nr);
    if (!color || !stack || !edge_i || !adj || !tail || !adj_start || !radj || !radj_start || !order || !comp) {
        free(adj), free(tail), free(adj_start), free(radj), free(radj_start), free(order), free(comp);
        goto done;
    }
    n_edges = 0;
    for (int32_t r = 0; r < nr; r++) {
        adj_start[r] = n_edges;
        for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (int32_t p = g->alt_start[a]; GE_KIND(g->elems[p]) == GE_RULE; p++) {
                uint32_t kn = GE_KIND(g->elems[p + 1]);
                tail[n_edges] = kn == GE_END || kn == GE_ALT;
                adj[n_edges++] = GE_ARG(g->elems[p]);
                if (!nullable[GE_ARG(g->elems[p])])
                    break;
            }
    }
    adj_start[nr] = n_edges;
    for (int32_t e = 0; e < n_edges; e++)
        radj_start[adj[e] + 2]++;
    for (int32_t r = 0; r < nr; r++)
        radj_start[r + 2] += radj_start[r + 1];
    for (int32_t r = 0; r < nr; r++)
        for (int32_t e = adj_start[r]; e < adj_start[r + 1]; e++)
            radj[radj_start[adj[e] + 1]++] = r;
    /* pass 1: finishing order on the graph */
    int32_t n_order = 0;
    for (int32_t s0 = 0; s0 < nr; s0++) {
        if (color[s0])
            continue;
        int32_t sp = 0;
        stack[0] = s0;
        edge_i[0] = adj_start[s0];
        color[s0] = 1;
        while (sp >= 0) {
            int32_t r = stack[sp];
            if (edge_i[sp] == adj_start[r + 1]) {
                order[n_order++] = r;
                sp--;
                continue;
            }
            int32_t next = adj[edge_i[sp]++];
            if (!color[next]) {
                color[next] = 1;
                stack[++sp] = next;
                edge_i[sp] = adj_start[next];
            }
        }
    }
    /* pass 2: components on the reversed graph, in reverse finishing order */
    for (int32_t r = 0; r < nr; r++)
        comp[r] = -1;
    for (int32_t k = nr - 1; k >= 0; k--) {
        int32_t s0 = order[k];
        if (comp[s0] >= 0)
            continue;
        int32_t sp = 0;
        stack[0] = s0;
        comp[s0] = s0;
        while (sp >= 0) {
            int32_t r = stack[sp--];
            for (int32_t e = radj_start[r]; e < radj_start[r + 1]; e++)
                if (comp[radj[e]] < 0) {
                    comp[radj[e]] = s0;
                    stack[++sp] = radj[e];
                }
        }
    }
    rc = FT_OK;
    for (int32_t r = 0; r < nr && !rc; r++)
        for (int32_t e = adj_start[r]; e < adj_start[r + 1]; e++)
            if (!tail[e] && comp[adj[e]] == comp[r]) {
                char l[80];
                rc = FT_EINVAL;
                gb_fail(b, FT_EINVAL, "rule %s is left-recursive (it can start with itself without reading a byte)",
                        rule_label(b, r, l, sizeof(l)));
                break;
            }
    free(tail);
    free(radj);
    free(radj_start);
    free(order);
    free(comp);
    free(adj);
    free(adj_start);
done:
    if (rc == FT_ENOMEM)
        gb_fail(b, FT_ENOMEM, "out of memory");
    free(nullable);
    free(cnt);
    free(alt_rule);
    free(occ_start);
    free(occ);
    free(queue);
    free(fill);
    free(color);
    free(stack);
    free(edge_i);
    return rc;
}

void ft_grammar_free(struct ft_grammar *g) {
    if (!g)
        return;
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alt);
    free(g->sets);
    free(g);
}

size_t ft_grammar_n_rules(const struct ft_grammar *g) { return (size_t)g->n_rules; }
size_t ft_grammar_n_elems(const struct ft_grammar *g) { return (size_t)g->n_elems; }

int gb_finish(struct gbuild *b, int32_t root, struct ft_grammar **out) {
    *out = NULL;
    if (b->rc)
        return b->rc;
    if (root < 0 || root >= b->n_rules)
        return gb_fail(b, FT_EINVAL, "the grammar has no root rule"), b->rc;
    for (int32_t r = 0; r < b->n_rules; r++)
        if (!b->rules[r].defined)
            return gb_fail(b, FT_EINVAL, "rule '%.60s' is used but not defined", b->rules[r].name), b->rc;
    struct ft_grammar *g = calloc(1, sizeof(*g));
    if (!g)
        return gb_fail(b, FT_ENOMEM, "out of memory"), b->rc;
    size_t n_el = 0, n_alt = 0;
    for (int32_t r = 0; r < b->n_rules; r++) {
        n_el += (size_t)b->rules[r].n + 1;
        n_alt += 1;
        for (int32_t i = 0; i < b->rules[r].n; i++)
            n_alt += GE_KIND(b->rules[r].el[i]) == GE_ALT;
    }
    g->elems = malloc(sizeof(uint32_t) * n_el);
    g->alt_start = malloc(sizeof(int32_t) * n_alt);
    g->rule_alt = malloc(sizeof(int32_t) * ((size_t)b->n_rules + 1));
    g->sets = malloc(sizeof(struct ft_grammar_set) * (size_t)FT_MAX(b->n_sets, 1));
    if (!g->elems || !g->alt_start || !g->rule_alt || !g->sets) {
        ft_grammar_free(g);
        return gb_fail(b, FT_ENOMEM, "out of memory"), b->rc;
    }
    if (b->n_sets)
        memcpy(g->sets, b->sets, sizeof(struct ft_grammar_set) * (size_t)b->n_sets);
    g->n_sets = b->n_sets;
    int32_t p = 0, a = 0;
    for (int32_t r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = a;
        g->alt_start[a++] = p;
        for (int32_t i = 0; i < b->rules[r].n; i++) {
            g->elems[p++] = b->rules[r].el[i];
            if (GE_KIND(b->rules[r].el[i]) == GE_ALT)
                g->alt_start[a++] = p;
        }
        g->elems[p++] = GE_MAKE(GE_END, 0);
    }
    g->rule_alt[b->n_rules] = a;
    g->n_elems = p;
    g->n_rules = b->n_rules;
    g->root = root;
    if (check_left_recursion(b, g)) {
        ft_grammar_free(g);
        return b->rc;
    }
    *out = g;
    return FT_OK;
}

/* ---- GBNF ------------------------------------------------------------------- */

struct gbnf {
    struct gbuild *b;
    const char *s, *end;
    int depth;
};

static size_t gbnf_offset(const struct gbnf *p, const char *at) { return (size_t)(at - p->s); }

static void gbnf_space(struct gbnf *p, const char **c, bool newline_ok) {
    while (*c < p->end) {
        char ch = **c;
        if (ch == '#') {
            while (*c < p->end && **c != '\n')
                (*c)++;
        } else if (ch == ' ' || ch == '\t' || ch == '\r' || (newline_ok && ch == '\n')) {
            (*c)++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static int gbnf_char(struct gbnf *p, const char **c, uint32_t *cp) {
    const char *s = *c;
    if (s >= p->end)
        return gb_fail(p->b, FT_EINVAL, "GBNF: unexpected end of input");
    unsigned char u = (unsigned char)*s;
    if (u == '\\') {
        if (s + 1 >= p->end)
            return gb_fail(p->b, FT_EINVAL, "GBNF: unexpected end of input after '\\'");
        char e = s[1];
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = s + 2 + i < p->end ? hex_val(s[2 + i]) : -1;
                if (h < 0)
                    return gb_fail(p->b, FT_EINVAL, "GBNF: bad \\%c escape at byte %zu", e, gbnf_offset(p, s));
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                return gb_fail(p->b, FT_EINVAL, "GBNF: escape at byte %zu is not a Unicode scalar value",
                               gbnf_offset(p, s));
            *cp = v;
            *c = s + 2 + nhex;
            return 0;
        }
        switch (e) {
        case 'n': *cp = '\n'; break;
        case 'r': *cp = '\r'; break;
        case 't': *cp = '\t'; break;
        case '\\': case '"': case '[': case ']': case '-': case '^': *cp = (uint32_t)e; break;
        default: return gb_fail(p->b, FT_EINVAL, "GBNF: unknown escape '\\%c' at byte %zu", e, gbnf_offset(p, s));
        }
        *c = s + 2;
        return 0;
    }
    int n = u < 0x80 ? 1 : u >= 0xf0 ? 4 : u >= 0xe0 ? 3 : 2;
    if (s + n > p->end)
        return gb_fail(p->b, FT_EINVAL, "GBNF: truncated UTF-8 at byte %zu", gbnf_offset(p, s));
    uint32_t v = n == 1 ? u : (uint32_t)(u & (0x3f >> (n - 1)));
    for (int i = 1; i < n; i++)
        v = (v << 6) | ((unsigned char)s[i] & 0x3f);
    *cp = v;
    *c = s + n;
    return 0;
}

static int gbnf_alternatives(struct gbnf *p, const char **c, int32_t rule, bool nested);

static int32_t gbnf_named(struct gbnf *p, const char *name, size_t n) {
    char buf[128];
    if (n >= sizeof(buf))
        return gb_fail(p->b, FT_EINVAL, "GBNF: a rule name is longer than %zu bytes", sizeof(buf) - 1);
    memcpy(buf, name, n);
    buf[n] = '\0';
    for (int32_t r = 0; r < p->b->n_rules; r++)
        if (p->b->rules[r].name && !strcmp(p->b->rules[r].name, buf))
            return r;
    return gb_rule(p->b, buf);
}

/* One sequence: items until '|', ')' or (at the top level) a newline. */
static int gbnf_sequence(struct gbnf *p, const char **c, int32_t rule, bool nested) {
    struct gbuild *b = p->b;
    for (;;) {
        gbnf_space(p, c, nested);
        if (*c >= p->end || **c == '|' || **c == ')' || **c == '\n')
            return 0;
        const char *at = *c;
        /* the item becomes a rule `x` only if a postfix operator follows */
        int32_t x = -1;
        struct ft_grammar_set set;
        enum { IT_LIT, IT_SET, IT_RULE } kind;
        char lit[1024];
        size_t nlit = 0;
        if (**c == '"') {
            (*c)++;
            kind = IT_LIT;
            int32_t lr = -1;
            while (*c < p->end && **c != '"') {
                uint32_t cp;
                if (gbnf_char(p, c, &cp))
                    return -1;
                unsigned char u8[4];
                int n = utf8_encode(cp, u8);
                if (nlit + (size_t)n > sizeof(lit)) {
                    /* long literal: spill into a rule */
                    if (lr < 0 && (lr = gb_rule(b, NULL)) < 0)
                        return -1;
                    gb_lit(b, lr, lit, nlit);
                    nlit = 0;
                }
                memcpy(lit + nlit, u8, (size_t)n);
                nlit += (size_t)n;
            }
            if (*c >= p->end)
                return gb_fail(b, FT_EINVAL, "GBNF: unterminated string at byte %zu", gbnf_offset(p, at));
            (*c)++;
            if (lr >= 0) {
                gb_lit(b, lr, lit, nlit);
                nlit = 0;
                kind = IT_RULE;
                x = lr;
            }
        } else if (**c == '[' || **c == '.') {
            uint32_t ranges[2 * 256];
            int nr = 0;
            bool neg = false;
            if (**c == '.') {
                (*c)++;
                ranges[0] = 0;
                ranges[1] = 0x10ffff;
                nr = 1;
            } else {
                (*c)++;
                if (*c < p->end && **c == '^') {
                    neg = true;
                    (*c)++;
                }
                while (*c < p->end && **c != ']') {
                    uint32_t lo, hi;
                    if (gbnf_char(p, c, &lo))
                        return -1;
                    hi = lo;
                    if (*c + 1 < p->end && **c == '-' && (*c)[1] != ']') {
                        (*c)++;
                        if (gbnf_char(p, c, &hi))
                            return -1;
                    }
                    if (hi < lo)
                        return gb_fail(b, FT_EINVAL, "GBNF: empty range in the class at byte %zu", gbnf_offset(p, at));
                    if (nr == 256)
                        return gb_fail(b, FT_ERANGE, "GBNF: more than 256 ranges in the class at byte %zu",
                                       gbnf_offset(p, at));
                    ranges[2 * nr] = lo;
                    ranges[2 * nr + 1] = hi;
                    nr++;
                }
                if (*c >= p->end)
                    return gb_fail(b, FT_EINVAL, "GBNF: unterminated class at byte %zu", gbnf_offset(p, at));
                (*c)++;
            }
            if (neg) {
                /* complement over [0, 0x10ffff]: sort, then take the gaps */
                for (int i = 1; i < nr; i++)
                    for (int j = i; j > 0 && ranges[2 * j] < ranges[2 * (j - 1)]; j--) {
                        uint32_t t0 = ranges[2 * j], t1 = ranges[2 * j + 1];
                        ranges[2 * j] = ranges[2 * (j - 1)];
                        ranges[2 * j + 1] = ranges[2 * (j - 1) + 1];
                        ranges[2 * (j - 1)] = t0;
                        ranges[2 * (j - 1) + 1] = t1;
                    }
                uint32_t comp[2 * 257];
                int nc = 0;
                uint32_t next = 0;
                for (int i = 0; i < nr; i++) {
                    if (ranges[2 * i] > next) {
                        comp[2 * nc] = next;
                        comp[2 * nc + 1] = ranges[2 * i] - 1;
                        nc++;
                    }
                    if (ranges[2 * i + 1] + 1 > next)
                        next = ranges[2 * i + 1] + 1;
                }
                if (next <= 0x10ffff) {
                    comp[2 * nc] = next;
                    comp[2 * nc + 1] = 0x10ffff;
                    nc++;
                }
                if (nc == 0)
                    return gb_fail(b, FT_EINVAL, "GBNF: the class at byte %zu matches nothing", gbnf_offset(p, at));
                memcpy(ranges, comp, sizeof(uint32_t) * 2 * (size_t)nc);
                nr = nc;
            }
            /* a class becomes one element when ASCII, else a rule */
            bool ascii = true;
            for (int i = 0; i < nr; i++)
                ascii &= ranges[2 * i + 1] < 0x80;
            if (ascii) {
                kind = IT_SET;
                memset(&set, 0, sizeof(set));
                for (int i = 0; i < nr; i++)
                    gset_add_range(&set, ranges[2 * i], ranges[2 * i + 1]);
            } else {
                kind = IT_RULE;
                if ((x = gb_rule(b, NULL)) < 0)
                    return -1;
                gb_utf8_range(b, x, ranges, nr);
            }
        } else if (**c == '(') {
            if (++p->depth > FT_GRAMMAR_MAX_DEPTH)
                return gb_fail(b, FT_ERANGE, "GBNF: groups nest deeper than %d", FT_GRAMMAR_MAX_DEPTH);
            (*c)++;
            if ((x = gb_rule(b, NULL)) < 0 || gbnf_alternatives(p, c, x, true))
                return -1;
            gbnf_space(p, c, true);
            if (*c >= p->end || **c != ')')
                return gb_fail(b, FT_EINVAL, "GBNF: '(' at byte %zu is not closed", gbnf_offset(p, at));
            (*c)++;
            p->depth--;
            kind = IT_RULE;
        } else if (is_name_char(**c)) {
            const char *n0 = *c;
            while (*c < p->end && is_name_char(**c))
                (*c)++;
            if ((x = gbnf_named(p, n0, (size_t)(*c - n0))) < 0)
                return -1;
            kind = IT_RULE;
        } else {
            return gb_fail(b, FT_EINVAL, "GBNF: unexpected '%c' at byte %zu", **c, gbnf_offset(p, at));
        }
        /* postfix */
        int32_t min = -1, max = -1;
        if (*c < p->end && (**c == '*' || **c == '+' || **c == '?')) {
            min = **c == '+' ? 1 : 0;
            max = **c == '?' ? 1 : -1;
            (*c)++;
        } else if (*c < p->end && **c == '{') {
            const char *q = *c + 1;
            long lo = 0, hi;
            bool digits = false;
            while (q < p->end && *q >= '0' && *q <= '9' && lo <= FT_GRAMMAR_MAX_REPEAT) {
                lo = lo * 10 + (*q++ - '0');
                digits = true;
            }
            hi = lo;
            if (q < p->end && *q == ',') {
                q++;
                hi = -1;
                if (q < p->end && *q >= '0' && *q <= '9') {
                    hi = 0;
                    while (q < p->end && *q >= '0' && *q <= '9' && hi <= FT_GRAMMAR_MAX_REPEAT)
                        hi = hi * 10 + (*q++ - '0');
                }
            }
            if (!digits || q >= p->end || *q != '}')
                return gb_fail(b, FT_EINVAL, "GBNF: bad repetition at byte %zu", gbnf_offset(p, *c));
            *c = q + 1;
            min = (int32_t)lo;
            max = (int32_t)hi;
        }
        if (min < 0) {
            if (kind == IT_LIT)
                gb_lit(b, rule, lit, nlit);
            else if (kind == IT_SET)
                gb_set(b, rule, &set);
            else
                gb_ref(b, rule, x);
        } else {
            if (kind != IT_RULE) {
                if ((x = gb_rule(b, NULL)) < 0)
                    return -1;
                if (kind == IT_LIT)
                    gb_lit(b, x, lit, nlit);
                else
                    gb_set(b, x, &set);
            }
            int32_t rep = gb_repeat(b, x, min, max);
            if (rep < 0)
                return -1;
            gb_ref(b, rule, rep);
        }
        if (b->rc)
            return -1;
    }
}

static int gbnf_alternatives(struct gbnf *p, const char **c, int32_t rule, bool nested) {
    for (;;) {
        if (gbnf_sequence(p, c, rule, nested))
            return -1;
        gbnf_space(p, c, nested);
        if (*c < p->end && **c == '|') {
            (*c)++;
            gb_alt(p->b, rule);
            gbnf_space(p, c, true);
            continue;
        }
        return p->b->rc ? -1 : 0;
    }
}

int ft_grammar_from_gbnf(const char *src, size_t len, struct ft_grammar **out, char *err, size_t err_cap) {
    *out = NULL;
    struct gbuild b;
    gb_init(&b, err, err_cap);
    struct gbnf p = {.b = &b, .s = src, .end = src + len};
    if (len > FT_GRAMMAR_MAX_SOURCE) {
        gb_fail(&b, FT_ERANGE, "the grammar is longer than %u bytes", FT_GRAMMAR_MAX_SOURCE);
        goto done;
    }
    const char *c = src;
    for (;;) {
        gbnf_space(&p, &c, true);
        if (c >= p.end)
            break;
        const char *n0 = c;
        while (c < p.end && is_name_char(*c))
            c++;
        if (c == n0) {
            gb_fail(&b, FT_EINVAL, "GBNF: expected a rule name at byte %zu", gbnf_offset(&p, c));
            goto done;
        }
        int32_t r = gbnf_named(&p, n0, (size_t)(c - n0));
        if (r < 0)
            goto done;
        if (b.rules[r].defined) {
            gb_fail(&b, FT_EINVAL, "GBNF: rule '%s' is defined twice", b.rules[r].name);
            goto done;
        }
        b.rules[r].defined = true;
        gbnf_space(&p, &c, false);
        if (p.end - c < 3 || memcmp(c, "::=", 3) != 0) {
            gb_fail(&b, FT_EINVAL, "GBNF: expected '::=' at byte %zu", gbnf_offset(&p, c));
            goto done;
        }
        c += 3;
        gbnf_space(&p, &c, true);
        if (gbnf_alternatives(&p, &c, r, false))
            goto done;
        if (c < p.end && *c == ')') {
            gb_fail(&b, FT_EINVAL, "GBNF: unmatched ')' at byte %zu", gbnf_offset(&p, c));
            goto done;
        }
    }
    int32_t root = -1;
    for (int32_t r = 0; r < b.n_rules; r++)
        if (b.rules[r].name && !strcmp(b.rules[r].name, "root"))
            root = r;
    if (root < 0)
        gb_fail(&b, FT_EINVAL, "GBNF: the grammar has no 'root' rule");
    else
        gb_finish(&b, root, out);
done:;
    int rc = b.rc;
    gb_free(&b);
    return rc;
}

int ft_grammar_from_choices(const char *const *choices, size_t n, struct ft_grammar **out, char *err, size_t err_cap) {
    *out = NULL;
    struct gbuild b;
    gb_init(&b, err, err_cap);
    size_t total = 0;
    if (n == 0 || n > FT_GRAMMAR_MAX_CHOICES)
        gb_fail(&b, FT_EINVAL, "give 1 to %d choices (got %zu)", FT_GRAMMAR_MAX_CHOICES, n);
    for (size_t i = 0; !b.rc && i < n; i++) {
        const size_t len = strlen(choices[i]);
        if (len == 0)
            gb_fail(&b, FT_EINVAL, "choice %zu is empty", i);
        else if ((total += len) > FT_GRAMMAR_MAX_SOURCE)
            gb_fail(&b, FT_ERANGE, "the choices are longer than %u bytes in all", FT_GRAMMAR_MAX_SOURCE);
    }
    int32_t root = b.rc ? -1 : gb_rule(&b, NULL);
    for (size_t i = 0; root >= 0 && i < n; i++) {
        if (i)
            gb_alt(&b, root);
        gb_lit(&b, root, choices[i], strlen(choices[i]));
    }
    if (root >= 0 && !b.rc)
        gb_finish(&b, root, out);
    int rc = b.rc;
    gb_free(&b);
    return rc;
}
