/* ft compare's speed columns: run `ft bench` as a subprocess of this same
 * binary and read its llama-bench-compatible JSON. A subprocess keeps
 * compare independent of how bench is built (and gives each measurement a
 * fresh process, as separate llama-bench runs would). */
#include "cmd_compare.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define BENCH_MAX_OUTPUT (16u << 20)

static double num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

int ft_compare_parse_bench_json(const char *json, double *pp_ts, double *pp_sd, double *tg_ts, double *tg_sd) {
    /* Skip anything printed before the JSON (a banner line, say). */
    const char *start = json + strcspn(json, "[{");
    cJSON *root = *start ? cJSON_Parse(start) : NULL;
    if (!root)
        return -1;
    /* llama-bench -o json prints an array; accept {"results": [...]} too. */
    const cJSON *arr = root;
    if (cJSON_IsObject(root)) {
        arr = cJSON_GetObjectItemCaseSensitive(root, "results");
        if (!arr)
            arr = cJSON_GetObjectItemCaseSensitive(root, "rows");
    }
    bool have_pp = false, have_tg = false;
    const cJSON *row;
    if (!cJSON_IsArray(arr))
        arr = NULL;
    cJSON_ArrayForEach(row, arr) {
        if (!cJSON_IsObject(row))
            continue;
        double np = num(row, "n_prompt", -1), ng = num(row, "n_gen", -1);
        const cJSON *test = cJSON_GetObjectItemCaseSensitive(row, "test");
        const char *ts = cJSON_IsString(test) ? test->valuestring : "";
        bool is_pp = (np > 0 && ng == 0) || !strncmp(ts, "pp", 2);
        bool is_tg = (ng > 0 && np == 0) || !strncmp(ts, "tg", 2);
        double avg = num(row, "avg_ts", -1), sd = num(row, "stddev_ts", 0);
        if (avg <= 0)
            continue;
        if (is_pp && !have_pp) {
            *pp_ts = avg;
            *pp_sd = sd;
            have_pp = true;
        } else if (is_tg && !have_tg) {
            *tg_ts = avg;
            *tg_sd = sd;
            have_tg = true;
        }
    }
    cJSON_Delete(root);
    return have_pp && have_tg ? 0 : -1;
}

struct buf {
    char *p;
    size_t n, cap;
    bool open;
};

/* Append what fd has to b (bounded); false at EOF or error. */
static bool drain(int fd, struct buf *b) {
    if (b->cap - b->n < 4097) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        char *np = cap <= BENCH_MAX_OUTPUT ? realloc(b->p, cap) : NULL;
        if (!np)
            return false;
        b->p = np;
        b->cap = cap;
    }
    ssize_t r = read(fd, b->p + b->n, b->cap - 1 - b->n);
    if (r < 0 && errno == EINTR)
        return true;
    if (r <= 0)
        return false;
    b->n += (size_t)r;
    b->p[b->n] = '\0';
    return true;
}

/* Read the child's stdout and stderr together (either could fill its pipe). */
static void read_both(int fd_out, int fd_err, struct buf *out, struct buf *err) {
    out->open = err->open = true;
    while (out->open || err->open) {
        struct pollfd pf[2] = {{.fd = out->open ? fd_out : -1, .events = POLLIN},
                               {.fd = err->open ? fd_err : -1, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[0].revents && !drain(fd_out, out))
            out->open = false;
        if (pf[1].revents && !drain(fd_err, err))
            err->open = false;
    }
}

int ft_compare_bench(struct cmp_row *row, int p, int n, int r, int threads) {
    char sp[16], sn[16], sr[16], st[16];
    snprintf(sp, sizeof(sp), "%d", p);
    snprintf(sn, sizeof(sn), "%d", n);
    snprintf(sr, sizeof(sr), "%d", r);
    snprintf(st, sizeof(st), "%d", threads);
    char *argv[] = {"ft", "bench", "-m", row->path, "-p", sp, "-n", sn, "-r", sr, "-t", st, "-o", "json", NULL};
    int out_pipe[2], err_pipe[2];
    if (pipe(out_pipe) != 0)
        return -1;
    if (pipe(err_pipe) != 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
    posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (rc != 0) {
        fprintf(stderr, "ft compare: cannot run ft bench: %s\n", strerror(rc));
        close(out_pipe[0]);
        close(err_pipe[0]);
        return -1;
    }
    struct buf bo = {0}, be = {0};
    read_both(out_pipe[0], err_pipe[0], &bo, &be);
    char *out = bo.p, *err = be.p;
    close(out_pipe[0]);
    close(err_pipe[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int result = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && out &&
        ft_compare_parse_bench_json(out, &row->pp_ts, &row->pp_sd, &row->tg_ts, &row->tg_sd) == 0) {
        row->has_speed = true;
        result = 0;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && err && strstr(err, "unknown command")) {
        result = 1;
    } else {
        const char *msg = err && *err ? err : "no JSON with a prefill and a decode row";
        fprintf(stderr, "ft compare: ft bench failed on %s: %.*s\n", row->path, (int)strcspn(msg, "\n"), msg);
    }
    free(out);
    free(err);
    return result;
}
