/* Reasoning text apart from the answer (engine/include/ft/reasoning.h).
 *
 * One state machine per syntax over a buffer `hold` of undecided text: each
 * feed appends the piece and runs steps until none makes progress; a step
 * releases a prefix of `hold` to the reasoning or the content (or drops a
 * marker) and keeps the rest. What stays held is always bounded by a marker's
 * length plus whitespace, except a harmony header (HEADER_MAX) and a harmony
 * tool call's arguments, which are released only as a whole. The rules
 * follow llama.cpp's parsers in common/chat.cpp (build 80fb11a): the think
 * syntax is its optional(optspace("<think>") reasoning(until "</think>")
 * optspace("</think>")) prefix, the harmony one its gpt-oss grammar. */
#include "ft/reasoning.h"

#include "ft/common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* memmem that takes an empty (possibly NULL) haystack: memmem's arguments
 * must not be NULL even when the length is 0 (UBSan, fuzz_reasoning). */
static const char *find_bytes(const void *s, size_t n, const char *needle, size_t m) {
    if (!s || n < m)
        return NULL;
    return memmem(s, n, needle, m);
}

#define HEADER_MAX 512 /* a harmony header longer than this is not one: the text is content */

enum {
    /* think */
    T_START,        /* nothing but whitespace yet: an opening tag may come */
    T_REASON_LEAD,  /* after <think>: whitespace is dropped */
    T_REASON,       /* reasoning until </think> */
    T_CONTENT_LEAD, /* after </think>: whitespace is dropped */
    T_CONTENT,      /* the rest is content */
    /* harmony */
    H_HEADER,  /* reading <|start|>assistant<|channel|>...<|message|> */
    H_REASON,  /* an analysis message */
    H_CONTENT, /* a final or commentary message */
    H_TOOL,    /* a call's arguments */
    H_SKIP,    /* a message to another recipient: dropped, as llama.cpp does */
    H_PLAIN,   /* no harmony markup: content as written */
};

static const char think_open[] = "<think>", think_close[] = "</think>";
static const char h_message[] = "<|message|>", h_channel[] = "<|channel|>";
static const char h_analysis_open[] = "<|channel|>analysis<|message|>";
static const char *const h_ends[] = {"<|end|>", "<|return|>", "<|call|>"};

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

enum ft_reasoning_syntax ft_reasoning_syntax_detect(const char *src, size_t len) {
    if (!src)
        return FT_REASONING_SYNTAX_NONE;
    if (find_bytes(src, len, h_channel, sizeof(h_channel) - 1) && find_bytes(src, len, h_message, sizeof(h_message) - 1))
        return FT_REASONING_SYNTAX_HARMONY;
    if (find_bytes(src, len, think_open, sizeof(think_open) - 1))
        return FT_REASONING_SYNTAX_THINK;
    return FT_REASONING_SYNTAX_NONE;
}

const char *ft_reasoning_syntax_name(enum ft_reasoning_syntax s) {
    switch (s) {
    case FT_REASONING_SYNTAX_THINK: return "think";
    case FT_REASONING_SYNTAX_HARMONY: return "harmony";
    default: return "none";
    }
}

int ft_reasoning_format_parse(const char *name, enum ft_reasoning_format *out) {
    static const char *const names[] = {"auto", "none", "deepseek"};
    for (size_t i = 0; name && i < FT_ARRAY_LEN(names); i++)
        if (!strcmp(name, names[i])) {
            *out = (enum ft_reasoning_format)i;
            return FT_OK;
        }
    return FT_EINVAL;
}

const char *ft_reasoning_format_name(enum ft_reasoning_format f) {
    return f == FT_REASONING_FORMAT_NONE ? "none" : f == FT_REASONING_FORMAT_DEEPSEEK ? "deepseek" : "auto";
}

static bool ends_with(const char *s, size_t n, const char *lit) {
    const size_t k = strlen(lit);
    return n >= k && !memcmp(s + n - k, lit, k);
}

bool ft_reasoning_prompt_opens(enum ft_reasoning_syntax s, const char *prompt, size_t len) {
    if (!prompt)
        return false;
    if (s == FT_REASONING_SYNTAX_THINK) {
        while (len && is_ws(prompt[len - 1]))
            len--;
        return ends_with(prompt, len, think_open);
    }
    return s == FT_REASONING_SYNTAX_HARMONY && ends_with(prompt, len, h_analysis_open);
}

/* ---- buffers ---------------------------------------------------------------- */

static int buf_add(struct ft_reasoning_buf *b, const char *s, size_t n) {
    if (!n)
        return FT_OK;
    if (b->n + n + 1 < b->n)
        return FT_ENOMEM;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) {
            if (cap > SIZE_MAX / 2)
                return FT_ENOMEM;
            cap *= 2;
        }
        char *p = realloc(b->s, cap);
        if (!p)
            return FT_ENOMEM;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return FT_OK;
}

static void buf_clear(struct ft_reasoning_buf *b) {
    b->n = 0;
    if (b->s)
        b->s[0] = '\0';
}

/* Drop the first n bytes of b. */
static void buf_drop(struct ft_reasoning_buf *b, size_t n) {
    if (n >= b->n) {
        buf_clear(b);
        return;
    }
    memmove(b->s, b->s + n, b->n - n);
    b->n -= n;
    b->s[b->n] = '\0';
}

static void buf_free(struct ft_reasoning_buf *b) {
    free(b->s);
    *b = (struct ft_reasoning_buf){0};
}

/* The length of the longest proper suffix of s[0..n) that begins lit. */
static size_t partial_suffix(const char *s, size_t n, const char *lit) {
    const size_t k = strlen(lit);
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (!memcmp(s + n - m, lit, m))
            return m;
    return 0;
}

static size_t skip_ws(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

static size_t rtrim(const char *s, size_t n) {
    while (n && is_ws(s[n - 1]))
        n--;
    return n;
}

/* ---- the parser ------------------------------------------------------------- */

void ft_reasoning_init(struct ft_reasoning_parser *p, enum ft_reasoning_syntax syntax, bool extract,
                       bool starts_in_reasoning) {
    *p = (struct ft_reasoning_parser){.syntax = syntax, .extract = extract};
    if (syntax == FT_REASONING_SYNTAX_THINK)
        p->state = !extract ? T_CONTENT : starts_in_reasoning ? T_REASON_LEAD : T_START;
    else if (syntax == FT_REASONING_SYNTAX_HARMONY)
        p->state = starts_in_reasoning ? H_REASON : H_HEADER;
    else
        p->state = T_CONTENT;
}

static int release(struct ft_reasoning_parser *p, struct ft_reasoning_buf *to, size_t n) {
    int rc = buf_add(to, p->hold.s, n);
    if (!rc && to == &p->reasoning)
        p->reasoning_total += n;
    buf_drop(&p->hold, n);
    return rc;
}

static int push_call(struct ft_reasoning_parser *p, const char *args, size_t n) {
    if (p->n_calls == p->cap_calls) {
        const size_t cap = p->cap_calls ? p->cap_calls * 2 : 4;
        struct ft_reasoning_call *c = realloc(p->calls, cap * sizeof(*c));
        if (!c)
            return FT_ENOMEM;
        p->calls = c;
        p->cap_calls = cap;
    }
    const size_t i = skip_ws(args, n);
    n = rtrim(args, n);
    struct ft_reasoning_call *c = &p->calls[p->n_calls];
    c->name = strndup(p->call_name.s ? p->call_name.s : "", p->call_name.n);
    c->arguments = strndup(args + i, n > i ? n - i : 0);
    if (!c->name || !c->arguments) {
        free(c->name);
        free(c->arguments);
        return FT_ENOMEM;
    }
    p->n_calls++;
    buf_clear(&p->call_name);
    return FT_OK;
}

/* One step of the think syntax; *progress when it changed anything. */
static int step_think(struct ft_reasoning_parser *p, bool final, bool *progress) {
    struct ft_reasoning_buf *h = &p->hold;
    const size_t lo = sizeof(think_open) - 1, lc = sizeof(think_close) - 1;
    switch (p->state) {
    case T_START: {
        const size_t i = skip_ws(h->s, h->n), m = h->n - i;
        if (m >= lo && !memcmp(h->s + i, think_open, lo)) {
            buf_drop(h, i + lo);
            p->state = T_REASON_LEAD;
            *progress = true;
        } else if (m == 0 || (m < lo && !memcmp(h->s + i, think_open, m))) {
            if (final) /* whitespace or a partial tag at the very end: content */
                return release(p, &p->content, h->n);
        } else {
            p->state = T_CONTENT;
            *progress = true;
        }
        return FT_OK;
    }
    case T_REASON_LEAD:
    case T_CONTENT_LEAD: {
        buf_drop(h, skip_ws(h->s, h->n));
        if (h->n) {
            p->state = p->state == T_REASON_LEAD ? T_REASON : T_CONTENT;
            *progress = true;
        }
        return FT_OK;
    }
    case T_REASON: {
        const char *end = find_bytes(h->s, h->n, think_close, lc);
        if (end) {
            const size_t i = (size_t)(end - h->s), r = rtrim(h->s, i);
            int rc = release(p, &p->reasoning, r);
            buf_drop(h, i - r + lc);
            p->state = T_CONTENT_LEAD;
            *progress = true;
            return rc;
        }
        if (final) {
            int rc = release(p, &p->reasoning, rtrim(h->s, h->n));
            buf_clear(h);
            return rc;
        }
        /* Hold a partial "</think>" and the whitespace before it: dropped
         * if the tag comes. */
        return release(p, &p->reasoning, rtrim(h->s, h->n - partial_suffix(h->s, h->n, think_close)));
    }
    default: /* T_CONTENT */
        return release(p, &p->content, h->n);
    }
}

/* The header h[0..n) (before <|message|>): the state of its body. */
static int harmony_header(struct ft_reasoning_parser *p, const char *h, size_t n) {
    char channel[32] = "";
    const char *c = find_bytes(h, n, h_channel, sizeof(h_channel) - 1);
    if (c) {
        const char *s = c + sizeof(h_channel) - 1, *e = s;
        while (e < h + n && e - s < (ptrdiff_t)sizeof(channel) - 1 &&
               (('a' <= *e && *e <= 'z') || ('A' <= *e && *e <= 'Z') || ('0' <= *e && *e <= '9') || *e == '_' ||
                *e == '-'))
            e++;
        memcpy(channel, s, (size_t)(e - s));
        channel[e - s] = '\0';
    }
    const char *to = find_bytes(h, n, "to=", 3);
    if (to) {
        const char *s = to + 3, *e = s;
        while (e < h + n && *e != ' ' && *e != '<')
            e++;
        static const char fn[] = "functions.";
        const size_t k = sizeof(fn) - 1;
        if ((size_t)(e - s) > k && !memcmp(s, fn, k)) {
            buf_clear(&p->call_name);
            if (buf_add(&p->call_name, s + k, (size_t)(e - s) - k))
                return FT_ENOMEM;
            p->state = H_TOOL;
            return FT_OK;
        }
        if (!((size_t)(e - s) == 9 && !memcmp(s, "assistant", 9))) {
            p->state = H_SKIP;
            return FT_OK;
        }
    }
    if (!strcmp(channel, "analysis")) {
        p->state = H_REASON;
        if (!p->extract)
            return buf_add(&p->content, h_analysis_open, sizeof(h_analysis_open) - 1);
    } else {
        p->state = H_CONTENT;
    }
    return FT_OK;
}

/* The first message terminator in s[0..n): its offset and *len, or n. */
static size_t find_end(const char *s, size_t n, size_t *len) {
    size_t best = n;
    *len = 0;
    for (size_t i = 0; i < FT_ARRAY_LEN(h_ends); i++) {
        const char *e = find_bytes(s, best, h_ends[i], strlen(h_ends[i]));
        if (e && (size_t)(e - s) < best) {
            best = (size_t)(e - s);
            *len = strlen(h_ends[i]);
        }
    }
    return best;
}

static int step_harmony(struct ft_reasoning_parser *p, bool final, bool *progress) {
    struct ft_reasoning_buf *h = &p->hold;
    if (p->state == H_PLAIN)
        return release(p, &p->content, h->n);
    if (p->state == H_HEADER) {
        if (!h->n)
            return FT_OK;
        const char *m = find_bytes(h->s, h->n, h_message, sizeof(h_message) - 1);
        /* Headers are "<|start|>assistant", "<|channel|>..." and " to=...":
         * anything else means the model wrote no markup. Judged on the
         * header alone (without a partial <|message|>), so that it is the
         * same verdict however the text was cut. */
        const size_t hl = m ? (size_t)(m - h->s) : h->n - partial_suffix(h->s, h->n, h_message);
        if ((h->s[0] != '<' && h->s[0] != ' ') || memchr(h->s, '\n', hl) || hl > HEADER_MAX) {
            p->state = H_PLAIN;
            *progress = true;
            return FT_OK;
        }
        if (m) {
            int rc = harmony_header(p, h->s, hl);
            buf_drop(h, hl + sizeof(h_message) - 1);
            *progress = true;
            return rc;
        }
        if (final)
            buf_clear(h); /* a header without a message: nothing to say */
        return FT_OK;
    }
    size_t tl;
    const size_t end = find_end(h->s, h->n, &tl);
    const bool found = tl > 0;
    size_t n = end; /* the body bytes decided now */
    if (!found && !final) {
        size_t k = 0;
        for (size_t i = 0; i < FT_ARRAY_LEN(h_ends); i++) {
            const size_t s = partial_suffix(h->s, h->n, h_ends[i]);
            k = s > k ? s : k;
        }
        n = h->n - k;
    }
    int rc = FT_OK;
    switch (p->state) {
    case H_REASON:
        rc = release(p, p->extract ? &p->reasoning : &p->content, n);
        if (!rc && found && !p->extract)
            rc = buf_add(&p->content, h_ends[0], strlen(h_ends[0]));
        break;
    case H_CONTENT: rc = release(p, &p->content, n); break;
    case H_TOOL:
        if (!found && !final)
            return FT_OK; /* the arguments go out whole */
        rc = push_call(p, h->s, n);
        buf_drop(h, n);
        break;
    default: /* H_SKIP */ buf_drop(h, n); break;
    }
    if (found) {
        buf_drop(h, tl);
        p->state = H_HEADER;
        *progress = true;
    }
    return rc;
}

static int run(struct ft_reasoning_parser *p, bool final) {
    buf_clear(&p->reasoning);
    buf_clear(&p->content);
    if (p->syntax == FT_REASONING_SYNTAX_NONE)
        return release(p, &p->content, p->hold.n);
    bool progress = true;
    int rc = FT_OK;
    while (!rc && progress) {
        progress = false;
        rc = p->syntax == FT_REASONING_SYNTAX_THINK ? step_think(p, final, &progress)
                                                    : step_harmony(p, final, &progress);
    }
    return rc;
}

int ft_reasoning_feed(struct ft_reasoning_parser *p, const char *text, size_t len) {
    int rc = buf_add(&p->hold, text, len);
    if (rc) {
        FT_LOG_E("out of memory");
        return rc;
    }
    return run(p, false);
}

int ft_reasoning_finish(struct ft_reasoning_parser *p) { return run(p, true); }

void ft_reasoning_free(struct ft_reasoning_parser *p) {
    if (!p)
        return;
    buf_free(&p->hold);
    buf_free(&p->reasoning);
    buf_free(&p->content);
    buf_free(&p->call_name);
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    p->calls = NULL;
    p->n_calls = p->cap_calls = 0;
}
