/* libFuzzer target for the reasoning parser (engine/text/reasoning.c):
 * model text, which a prompt-injected or broken model controls, split into
 * reasoning and content.
 *
 * Input layout: one byte (bits 0-1 the syntax: none, think, harmony; bit 2
 * extraction off; bit 3 the prompt opened the reasoning), then the text.
 * Must never crash, leak or trip a sanitizer; the text fed in pieces (cut
 * where the bytes of the text say) must give the same reasoning, content
 * and calls as fed whole; with extraction on, the reasoning and content
 * together are never longer than the text.
 * Seeds: tests/fuzz/corpus/reasoning.
 */
#include "ft/common.h"
#include "ft/reasoning.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
FUZZ_QUIET_INITIALIZE()

struct out {
    char *r, *c;
    size_t nr, nc;
};

static void take(struct out *o, const struct ft_reasoning_parser *p) {
    o->r = realloc(o->r, o->nr + p->reasoning.n + 1);
    o->c = realloc(o->c, o->nc + p->content.n + 1);
    if (!o->r || !o->c)
        abort();
    if (p->reasoning.n)
        memcpy(o->r + o->nr, p->reasoning.s, p->reasoning.n);
    if (p->content.n)
        memcpy(o->c + o->nc, p->content.s, p->content.n);
    o->nr += p->reasoning.n;
    o->nc += p->content.n;
}

/* Feed text whole (step 0) or in pieces whose lengths the text's bytes give. */
static void run(int syn, bool extract, bool opens, const char *t, size_t n, size_t step, struct out *o,
                struct ft_reasoning_parser *p) {
    ft_reasoning_init(p, (enum ft_reasoning_syntax)syn, extract, opens);
    for (size_t at = 0; at < n;) {
        size_t k = step ? 1 + ((unsigned char)t[at] + step) % 7 : n;
        if (k > n - at)
            k = n - at;
        if (ft_reasoning_feed(p, t + at, k))
            abort();
        take(o, p);
        at += k;
    }
    if (ft_reasoning_finish(p))
        abort();
    take(o, p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const int syn = data[0] & 3;
    if (syn > 2)
        return 0;
    const bool extract = !(data[0] & 4), opens = data[0] & 8;
    const char *t = (const char *)data + 1;
    const size_t n = size - 1;
    struct out a = {0}, b = {0};
    struct ft_reasoning_parser pa, pb;
    run(syn, extract, opens, t, n, 0, &a, &pa);
    run(syn, extract, opens, t, n, 3, &b, &pb);
    if (a.nr != b.nr || a.nc != b.nc || (a.nr && memcmp(a.r, b.r, a.nr)) || (a.nc && memcmp(a.c, b.c, a.nc)))
        abort();
    if (pa.n_calls != pb.n_calls)
        abort();
    for (size_t i = 0; i < pa.n_calls; i++)
        if (strcmp(pa.calls[i].name, pb.calls[i].name) || strcmp(pa.calls[i].arguments, pb.calls[i].arguments))
            abort();
    if (extract && a.nr + a.nc > n)
        abort();
    ft_reasoning_free(&pa);
    ft_reasoning_free(&pb);
    free(a.r);
    free(a.c);
    free(b.r);
    free(b.c);
    return 0;
}
