/* Control tokens come only from the template: plain text never tokenizes to
 * a control token, in every vocabulary of ../shared/vocab and the default
 * Gemma 3 model, for texts full of special-token strings — and the ids agree
 * with llama.cpp's, with special-token parsing off and on.
 *
 * Oracle: tests/data/tokenizer/special-NAME.json, written by
 * tools/gen_tokenizer_special_cases.py from llama.cpp's own tokenizer (which
 * also decided which tokens are special). */
#include "ft/common.h"
#include "ft/gguf.h"
#include "ft/tokenizer.h"
#include "ft_test.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = '\0';
    fclose(f);
    return b;
}

static bool ids_match(const cJSON *want, const int32_t *ids, size_t n) {
    if ((size_t)cJSON_GetArraySize(want) != n)
        return false;
    size_t i = 0;
    for (const cJSON *v = want->child; v; v = v->next, i++)
        if (v->valueint != ids[i])
            return false;
    return true;
}

static void print_case(const char *name, const char *text, const cJSON *want, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s: '%s'\n    llama.cpp:", name, text);
    for (const cJSON *v = want->child; v; v = v->next)
        fprintf(stderr, " %d", v->valueint);
    fprintf(stderr, "\n    ft:       ");
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Returns the number of cases checked. */
static int check_vocab(const char *name, const char *gguf_path, const char *json_path) {
    char *text = read_file(json_path);
    CHECKF(text != NULL, "%s: cannot read %s", name, json_path);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECKF(doc != NULL, "%s: %s does not parse", name, json_path);
    struct ft_gguf *g = NULL;
    struct ft_tokenizer *t = NULL;
    CHECKF(ft_gguf_open(gguf_path, &g) == 0 && ft_tokenizer_load(g, &t) == 0, "%s: cannot load %s", name,
           gguf_path);
    int n_cases = 0;
    /* Every token llama.cpp counts as control is a control token here too. */
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(doc, "specials");
    for (const cJSON *s = specials ? specials->child : NULL; s && t; s = s->next) {
        const int id = cJSON_GetObjectItemCaseSensitive(s, "id")->valueint;
        const int attr = cJSON_GetObjectItemCaseSensitive(s, "attr")->valueint;
        CHECKF(ft_tokenizer_is_control(t, id) == ((attr & 8) != 0), "%s: token %d '%s': control %d here, attr %d in llama.cpp",
               name, id, cJSON_GetObjectItemCaseSensitive(s, "text")->valuestring, ft_tokenizer_is_control(t, id), attr);
    }
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    for (const cJSON *c = cases ? cases->child : NULL; c && t; c = c->next) {
        const char *s = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        for (int parse = 0; parse < 2; parse++) {
            const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, parse ? "special" : "plain");
            int32_t *ids = NULL;
            size_t n = 0;
            const int rc = ft_tokenize(t, s, strlen(s), false, parse, &ids, &n);
            CHECKF(rc == 0, "%s: tokenize failed", name);
            const bool same = rc == 0 && ids_match(want, ids, n);
            CHECKF(same, "%s: parse_special=%d differs from llama.cpp", name, parse);
            if (!same)
                print_case(name, s, want, ids, n);
            if (!parse)
                for (size_t i = 0; i < n; i++)
                    CHECKF(!ft_tokenizer_is_control(t, ids[i]), "%s: plain text '%s' gave control token %d", name, s,
                           ids[i]);
            free(ids);
        }
        n_cases++;
    }
    ft_tokenizer_free(t);
    ft_gguf_close(g);
    cJSON_Delete(doc);
    return n_cases;
}

int main(void) {
    const char *src = getenv("FT_SOURCE_DIR");
    const char *shared = ft_test_shared_dir();
    if (!src || !shared)
        FT_TEST_SKIP("FT_SOURCE_DIR or ../shared (with vocab/) not found");
    static const char *const vocabs[] = {"llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2"};
    char gguf[4096], json[4096];
    for (size_t i = 0; i < FT_ARRAY_LEN(vocabs); i++) {
        snprintf(gguf, sizeof(gguf), "%s/vocab/ggml-vocab-%s.gguf", shared, vocabs[i]);
        snprintf(json, sizeof(json), "%s/tests/data/tokenizer/special-%s.json", src, vocabs[i]);
        printf("  %s: %d cases\n", vocabs[i], check_vocab(vocabs[i], gguf, json));
    }
    char *gemma = ft_test_gemma_path();
    if (gemma) {
        snprintf(json, sizeof(json), "%s/tests/data/tokenizer/special-gemma3.json", src);
        printf("  gemma3: %d cases\n", check_vocab("gemma3", gemma, json));
        free(gemma);
    } else {
        printf("  gemma3: the default model is not installed (set FT_GEMMA3_GGUF); not checked\n");
    }
    return ft_test_finish("test_tokenizer_special");
}
