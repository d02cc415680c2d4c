/* Real chat templates rendered as llama.cpp renders them.
 *
 * tests/data/templates/llama.cpp/ holds the chat templates llama.cpp ships in
 * models/templates/ (Qwen, Llama 3.x, Mistral, Gemma, DeepSeek, gpt-oss,
 * Granite, Hermes, ...) and tests/data/templates/expected/ what llama.cpp's own
 * Jinja engine renders from them for six conversations (with and without a
 * system message, tools, a tool call and its result, parallel calls), together
 * with the exact context it rendered (generate.py and oracle/render.cpp made
 * them; nothing here computes an expected value). Each case is rendered with
 * FreeToken's Jinja from the same context and compared byte for byte; a case
 * llama.cpp rejects (raise_exception) must fail here too.
 *
 * Templates that do not match yet are listed in known_mismatch[] with the
 * reason; the test fails when any other template differs, and also when a
 * listed one starts to match, so the list stays true. Set
 * FT_TEMPLATE_VERBOSE=1 to see where each mismatch starts. */
#include "ft_test.h"

#include "ft/chat_template.h"
#include "ft/common.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static const char *const known_mismatch[] = {
    NULL,
};

static bool is_known(const char *name) {
    for (size_t i = 0; known_mismatch[i]; i++)
        if (strcmp(known_mismatch[i], name) == 0)
            return true;
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void show_diff(const char *name, const char *scen, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    printf("  %s/%s differs at byte %zu\n    llama.cpp: %.*s|%.60s\n    freetoken: %.*s|%.60s\n", name, scen, i,
           (int)(i - from), want + from, want + i, (int)(i - from), got + from, got + i);
}

/* 1 when every case of the template matches llama.cpp. */
static int check_template(const char *dir, const char *file, bool verbose, int *cases_ok, int *cases) {
    char path[8600];
    snprintf(path, sizeof(path), "%s/expected/%s", dir, file);
    char *text = ft_test_read_file(path, NULL);
    CHECKF(text != NULL, "cannot read %s", path);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECKF(doc != NULL, "%s is not JSON", path);
    if (!doc)
        return 0;
    const char *tname = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "template"));
    const cJSON *time = cJSON_GetObjectItem(doc, "time");
    const cJSON *list = cJSON_GetObjectItem(doc, "cases");
    CHECK(tname && cJSON_IsNumber(time) && cJSON_IsArray(list));
    if (!tname || !cJSON_IsNumber(time) || !cJSON_IsArray(list)) {
        cJSON_Delete(doc);
        return 0;
    }
    snprintf(path, sizeof(path), "%s/llama.cpp/%s", dir, tname);
    size_t n = 0;
    char *src = ft_test_read_file(path, &n);
    CHECKF(src != NULL, "cannot read %s", path);
    struct ft_chat_template *t = NULL;
    int prc = src ? ft_chat_template_parse(src, n, &t) : FT_EIO;
    free(src);
    if (prc && verbose)
        printf("  %s: does not parse (%d)\n", tname, prc);
    int ok = 1;
    const cJSON *c;
    cJSON_ArrayForEach(c, list) {
        const char *scen = cJSON_GetStringValue(cJSON_GetObjectItem(c, "scenario"));
        const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "output"));
        const cJSON *ctx = cJSON_GetObjectItem(c, "context");
        (*cases)++;
        char *got = NULL;
        int rc = prc ? prc : ft_chat_template_render_json(t, ctx, (int64_t)time->valuedouble, &got, NULL);
        bool same = want ? rc == 0 && strcmp(want, got) == 0 : rc != 0;
        if (same) {
            (*cases_ok)++;
        } else {
            ok = 0;
            if (verbose && !prc) {
                if (!want)
                    printf("  %s/%s: llama.cpp raises an error, FreeToken renders\n", tname, scen);
                else if (rc)
                    printf("  %s/%s: FreeToken fails (%d), llama.cpp renders\n", tname, scen, rc);
                else
                    show_diff(tname, scen, want, got);
            }
        }
        free(got);
    }
    ft_chat_template_free(t);
    cJSON_Delete(doc);
    return ok;
}

int main(void) {
    const char *src_dir = getenv("FT_SOURCE_DIR");
    if (!src_dir)
        FT_TEST_SKIP("FT_SOURCE_DIR unset");
    bool verbose = getenv("FT_TEMPLATE_VERBOSE") != NULL;
    char dir[4096], edir[4200];
    snprintf(dir, sizeof(dir), "%s/tests/data/templates", src_dir);
    snprintf(edir, sizeof(edir), "%s/expected", dir);
    DIR *d = opendir(edir);
    CHECKF(d != NULL, "cannot open %s", edir);
    if (!d)
        return ft_test_finish("test_chat_template_corpus");
    char *names[256];
    size_t nn = 0;
    for (struct dirent *e; (e = readdir(d)) && nn < FT_ARRAY_LEN(names);) {
        size_t l = strlen(e->d_name);
        if (l > 5 && l < 256 && strcmp(e->d_name + l - 5, ".json") == 0)
                names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof(names[0]), cmp_str);
    CHECKF(nn >= 68, "only %zu expected files", nn);

    int match = 0, cases_ok = 0, cases = 0;
    for (size_t i = 0; i < nn; i++) {
        char tname[300];
        snprintf(tname, sizeof(tname), "%.*s.jinja", (int)(strlen(names[i]) - 5), names[i]);
        int ok = check_template(dir, names[i], verbose, &cases_ok, &cases);
        match += ok;
        if (is_known(tname))
            CHECKF(!ok, "%s now matches llama.cpp: remove it from known_mismatch[]", tname);
        else
            CHECKF(ok, "%s differs from llama.cpp (FT_TEMPLATE_VERBOSE=1 shows where)", tname);
        if (verbose)
            printf("%s %s\n", ok ? "match" : "DIFF ", tname);
        free(names[i]);
    }
    printf("%d of %zu templates match llama.cpp byte for byte (%d of %d cases)\n", match, nn, cases_ok, cases);
    return ft_test_finish("test_chat_template_corpus");
}
