/* ft serve: the OpenAI-compatible HTTP server (http/include/ft/server.h). This
 * file only turns flags into a struct ft_server_config. */
#include "args.h"
#include "cli.h"
#include "common_model.h"
#include "ft/chat_template.h"
#include "ft/common.h"
#include "ft/kv_events.h"
#include "ft/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* API keys from --api-key and --api-key-file. */
struct key_set {
    char **keys;
    int n, cap;
};

#define MAX_KEYS 4096
#define MAX_KEY_LEN 512

static void key_set_free(struct key_set *ks) {
    for (int i = 0; i < ks->n; i++)
        free(ks->keys[i]);
    free(ks->keys);
}

static int key_set_add(struct key_set *ks, const char *key, size_t len) {
    if (ks->n == MAX_KEYS) {
        fprintf(stderr, "ft serve: more than %d API keys\n", MAX_KEYS);
        return -1;
    }
    if (ks->n == ks->cap) {
        const int cap = ks->cap ? 2 * ks->cap : 8;
        char **k = realloc(ks->keys, sizeof(*k) * (size_t)cap);
        if (!k)
            return -1;
        ks->keys = k;
        ks->cap = cap;
    }
    if (!(ks->keys[ks->n] = strndup(key, len)))
        return -1;
    ks->n++;
    return 0;
}

/* One key per line; blank lines and lines starting with '#' skipped,
 * surrounding spaces and a CR trimmed. */
static int read_key_file(const char *path, struct key_set *ks) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ft serve: cannot read --api-key-file %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[MAX_KEY_LEN + 2];
    int lineno = 0, before = ks->n, rc = 0;
    while (!rc && fgets(line, sizeof(line), f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
            fprintf(stderr, "ft serve: %s:%d: key longer than %d bytes\n", path, lineno, MAX_KEY_LEN);
            rc = -1;
            break;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        n = strlen(p);
        while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n == 0 || p[0] == '#')
            continue;
        rc = key_set_add(ks, p, n);
    }
    fclose(f);
    if (!rc && ks->n == before) {
        fprintf(stderr, "ft serve: --api-key-file %s holds no key\n", path);
        rc = -1;
    }
    return rc;
}

int ft_cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *key_file = NULL, *log_format = "text", *tmpl = NULL, *alias = NULL,
               *metrics_compat = NULL, *otlp = NULL, *kv_events = NULL, *kv_events_replay = NULL,
               *kv_events_topic = "", *kv_events_format = "map", *reasoning_format = "auto";
    int port = 8080, n_ctx = 0, n_batch = 512, parallel = 8, cache_mib = 1024, max_body = 8 << 20, max_queue = 64,
        timeout = 120, shutdown_timeout = 30, request_timeout = 0, max_conns = 4096;
    struct ft_cli_model_flags mf = FT_CLI_MODEL_FLAGS_DEFAULT;
    bool metrics = false, no_prefix_cache = false, log_prompts = false, special_in_messages = false,
         no_webui = false;
    struct ft_str_list keys = {0}, cors = {0};
    const struct ft_opt opts[] = {
        {"-m", "--model", FT_OPT_STR, &model, "FILE", "GGUF model (default: Gemma 3 270M from PyPI, or $FT_MODEL)"},
        {NULL, "--alias", FT_OPT_STR, &alias, "NAME", "model id in responses and /v1/models (default: the file name)"},
        {NULL, "--host", FT_OPT_STR, &host, "ADDR", "address to listen on (default 127.0.0.1: this machine only)"},
        {NULL, "--port", FT_OPT_INT, &port, "N", "port (default 8080; 0: any free port, printed)"},
        FT_CLI_MODEL_OPTS(mf),
        {"-c", "--ctx-size", FT_OPT_INT, &n_ctx, "N",
         "context per request (default: the model's, shrunk to fit -np requests in memory, not below 4096)"},
        {"-np", "--parallel", FT_OPT_INT, &parallel, "N",
         "requests generated at once, batched into shared steps (default 8, fewer if their KV does not fit)"},
        {NULL, "--cache-slots", FT_OPT_INT, &parallel, "N", "old name of --parallel"},
        {"-b", "--batch-tokens", FT_OPT_INT, &n_batch, "N",
         "tokens per step: one per decoding request plus prompt chunks (default 512)"},
        {NULL, "--batch-size", FT_OPT_INT, &n_batch, "N", "same as --batch-tokens"},
        {NULL, "--cache-mib", FT_OPT_INT, &cache_mib, "MIB",
         "KV memory beyond the running requests' for the prefix cache to keep (default 1024)"},
        {NULL, "--no-prefix-cache", FT_OPT_FLAG, &no_prefix_cache, NULL, "never reuse the KV of earlier prompts"},
        {NULL, "--enable-performance-metrics", FT_OPT_FLAG, &metrics, NULL,
         "add the per-request \"metrics\" object to every response"},
        {NULL, "--metrics-compat", FT_OPT_STR, &metrics_compat, "NAME",
         "GET /metrics also under another engine's names: vllm (vllm:num_requests_waiting, ...)"},
        {NULL, "--otlp-endpoint", FT_OPT_STR, &otlp, "URL",
         "export one OpenTelemetry span per request over OTLP/HTTP (JSON) to http://HOST[:4318][/v1/traces]"},
        {NULL, "--api-key", FT_OPT_STR_LIST, &keys, "KEY",
         "require 'Authorization: Bearer KEY' (all but /health and /livez); repeatable: any of them"},
        {NULL, "--api-key-file", FT_OPT_STR, &key_file, "FILE",
         "accepted keys, one per line ('#' starts a comment); adds to --api-key"},
        {NULL, "--cors-origin", FT_OPT_STR_LIST, &cors, "ORIGIN",
         "let browser pages from ORIGIN (https://host[:port], or * for any) call the API; repeatable (default: none)"},
        {NULL, "--no-webui", FT_OPT_FLAG, &no_webui, NULL,
         "serve no web UI (the chat page at / and the live view at /dashboard; the API stays)"},
        {NULL, "--special-tokens-in-messages", FT_OPT_FLAG, &special_in_messages, NULL,
         "let message text become control tokens, as llama-server and vLLM do (default: only the chat "
         "template writes them, so a message cannot forge a turn)"},
        {NULL, "--log-prompts", FT_OPT_FLAG, &log_prompts, NULL,
         "put each request's messages or prompt in its access-log line (default: never)"},
        {NULL, "--kv-events", FT_OPT_STR, &kv_events, "ENDPOINT",
         "publish the prefix cache's KV-block events in vLLM's format on a ZeroMQ PUB socket: tcp://*:5557 "
         "binds (as do ipc:// and [::]), tcp://HOST:PORT connects to a collector"},
        {NULL, "--kv-events-replay", FT_OPT_STR, &kv_events_replay, "ENDPOINT",
         "also bind a ZeroMQ ROUTER socket that replays recent event batches from a sequence number"},
        {NULL, "--kv-events-topic", FT_OPT_STR, &kv_events_topic, "TOPIC",
         "first frame of every KV-event message (default empty; llm-d reads kv@POD@MODEL)"},
        {NULL, "--kv-events-format", FT_OPT_STR, &kv_events_format, "FMT",
         "map: events as vLLM v0.26 sends them (default); array: positional, as vLLM up to v0.23"},
        {NULL, "--log-format", FT_OPT_STR, &log_format, "FMT", "access log on stdout: text (default) or json"},
        {NULL, "--chat-template", FT_OPT_STR, &tmpl, "FILE|NAME",
         "Jinja chat template file, or a built-in template (" FT_CHAT_TEMPLATE_BUILTIN_NAMES
         "), to use instead of the model's"},
        {NULL, "--reasoning-format", FT_OPT_STR, &reasoning_format, "FMT",
         "auto (default) or deepseek: a reasoning model's thinking (<think>, gpt-oss's analysis channel) comes "
         "back as reasoning_content; none: in content as written. A request's reasoning_format wins"},
        {NULL, "--max-body-size", FT_OPT_INT, &max_body, "BYTES", "largest request body (default 8388608)"},
        {NULL, "--max-queue", FT_OPT_INT, &max_queue, "N", "requests waiting at most; more get 503 (default 64)"},
        {NULL, "--timeout", FT_OPT_INT, &timeout, "S",
         "close connections idle or stalled in a write for S seconds (default 120; never during generation)"},
        {NULL, "--request-timeout", FT_OPT_INT, &request_timeout, "S",
         "a request head must arrive within S seconds of its first byte, a body may not stall for S "
         "(default 10, or --timeout if lower)"},
        {NULL, "--max-connections", FT_OPT_INT, &max_conns, "N",
         "client connections open at once; at the limit the longest idle one is closed (default 4096)"},
        {NULL, "--shutdown-timeout", FT_OPT_INT, &shutdown_timeout, "S",
         "on SIGTERM/SIGINT, let requests in flight finish for S seconds, then cancel them (default 30)"},
    };
    const struct ft_cmd_spec spec = {
        "serve", "ft serve [-m MODEL.gguf] [--host 127.0.0.1] [--port 8080] [-t N] [-c CTX] [options]",
        "Serves the model over an OpenAI-compatible HTTP API: POST /v1/chat/completions,\n"
        "POST /v1/completions, GET /v1/models, GET /health (readiness), GET /livez (liveness),\n"
        "GET /metrics (Prometheus), GET /v1/requests/recent (the last requests' metrics).\n"
        "A browser at http://HOST:PORT/ gets a chat page; /dashboard shows requests live (--no-webui: off).\n"
        "With --enable-performance-metrics (or \"performance_metrics\": true in a request) each\n"
        "response carries engine-measured TTFT, prefill and decode speed. One access-log line per\n"
        "request goes to stdout; SIGINT or SIGTERM stops the server.",
        opts, (int)FT_ARRAY_LEN(opts), 0};
    int code = ft_args_parse_opts(&spec, argc, argv);
    if (code != FT_ARGS_GO_ON)
        return code;
    if (port < 0 || port > 65535) {
        fprintf(stderr, "ft serve: --port must be in 0..65535 (got %d)\n", port);
        return 2;
    }
    if (n_ctx < 0 || (n_ctx > 0 && n_ctx < 16)) {
        fprintf(stderr, "ft serve: -c must be at least 16 (got %d)\n", n_ctx);
        return 2;
    }
    if (n_batch < 1 || n_batch > 4096) {
        fprintf(stderr, "ft serve: -b must be in 1..4096 (got %d)\n", n_batch);
        return 2;
    }
    if (parallel < 1 || parallel > 256) {
        fprintf(stderr, "ft serve: --parallel must be in 1..256 (got %d)\n", parallel);
        return 2;
    }
    if (cache_mib < 0 || cache_mib > (1 << 20)) {
        fprintf(stderr, "ft serve: --cache-mib must be in 0..1048576 (got %d)\n", cache_mib);
        return 2;
    }
    if (max_body < 1024) {
        fprintf(stderr, "ft serve: --max-body-size must be at least 1024 bytes (got %d)\n", max_body);
        return 2;
    }
    if (max_queue < 1 || max_queue > 1000000) {
        fprintf(stderr, "ft serve: --max-queue must be in 1..1000000 (got %d)\n", max_queue);
        return 2;
    }
    if (timeout < 1 || timeout > 86400) {
        fprintf(stderr, "ft serve: --timeout must be in 1..86400 seconds (got %d)\n", timeout);
        return 2;
    }
    if (request_timeout == 0)
        request_timeout = timeout < 10 ? timeout : 10;
    if (request_timeout < 1 || request_timeout > 86400) {
        fprintf(stderr, "ft serve: --request-timeout must be in 1..86400 seconds (got %d)\n", request_timeout);
        return 2;
    }
    if (max_conns < 16 || max_conns > 1000000) {
        fprintf(stderr, "ft serve: --max-connections must be in 16..1000000 (got %d)\n", max_conns);
        return 2;
    }
    if (shutdown_timeout < 0 || shutdown_timeout > 86400) {
        fprintf(stderr, "ft serve: --shutdown-timeout must be in 0..86400 seconds (got %d)\n", shutdown_timeout);
        return 2;
    }
    enum ft_reasoning_format reasoning = FT_REASONING_FORMAT_AUTO;
    if (ft_reasoning_format_parse(reasoning_format, &reasoning)) {
        fprintf(stderr, "ft serve: --reasoning-format must be none, auto or deepseek (got '%s')\n", reasoning_format);
        return 2;
    }
    if (strcmp(log_format, "text") != 0 && strcmp(log_format, "json") != 0) {
        fprintf(stderr, "ft serve: --log-format must be text or json (got '%s')\n", log_format);
        return 2;
    }
    if (metrics_compat && strcmp(metrics_compat, "vllm") != 0) {
        fprintf(stderr, "ft serve: --metrics-compat must be vllm (got '%s')\n", metrics_compat);
        return 2;
    }
    char why[160];
    if (kv_events && !ft_kv_events_endpoint_ok(kv_events, why, sizeof(why))) {
        fprintf(stderr, "ft serve: --kv-events: %s (got '%s')\n", why, kv_events);
        return 2;
    }
    if (kv_events_replay && !ft_kv_events_endpoint_ok(kv_events_replay, why, sizeof(why))) {
        fprintf(stderr, "ft serve: --kv-events-replay: %s (got '%s')\n", why, kv_events_replay);
        return 2;
    }
    if (!kv_events && (kv_events_replay || *kv_events_topic)) {
        fprintf(stderr, "ft serve: --kv-events-replay and --kv-events-topic need --kv-events\n");
        return 2;
    }
    if (kv_events && no_prefix_cache) {
        fprintf(stderr, "ft serve: --kv-events reports the prefix cache; it cannot go with --no-prefix-cache\n");
        return 2;
    }
    if (strcmp(kv_events_format, "map") != 0 && strcmp(kv_events_format, "array") != 0) {
        fprintf(stderr, "ft serve: --kv-events-format must be map or array (got '%s')\n", kv_events_format);
        return 2;
    }
    for (int i = 0; i < keys.n; i++) {
        if (!*keys.items[i]) {
            fprintf(stderr, "ft serve: --api-key must not be empty\n");
            return 2;
        }
    }
    for (int i = 0; i < cors.n; i++) {
        if (strcmp(cors.items[i], "*") != 0 && strncmp(cors.items[i], "http://", 7) != 0 &&
            strncmp(cors.items[i], "https://", 8) != 0) {
            fprintf(stderr, "ft serve: --cors-origin must be * or http(s)://HOST[:PORT] (got '%s')\n", cors.items[i]);
            return 2;
        }
    }
    struct ft_model_params mp;
    if (ft_cli_model_flags_params("serve", &mf, &mp))
        return 2;
    if (!model && !(model = ft_cli_default_model("serve")))
        return 2;
    struct key_set ks = {0};
    for (int i = 0; i < keys.n; i++) {
        if (key_set_add(&ks, keys.items[i], strlen(keys.items[i]))) {
            key_set_free(&ks);
            return 1;
        }
    }
    if (key_file && read_key_file(key_file, &ks)) {
        key_set_free(&ks);
        return 2;
    }
    struct ft_kv_events *ev = NULL;
    if (kv_events) {
        const struct ft_kv_events_config kc = {
            .endpoint = kv_events,
            .replay_endpoint = kv_events_replay,
            .topic = kv_events_topic,
            .format = strcmp(kv_events_format, "array") ? FT_KV_EVENTS_MAP : FT_KV_EVENTS_ARRAY,
        };
        ft_clear_error();
        const int rc = ft_kv_events_new(&kc, &ev);
        if (rc) {
            ft_cli_error("serve", rc, "cannot publish KV events");
            key_set_free(&ks);
            return 1;
        }
    }
    const struct ft_server_config cfg = {
        .model_path = model,
        .model_alias = alias,
        .host = host,
        .port = port,
        .model = mp,
        .n_ctx = n_ctx,
        .n_batch = n_batch,
        .parallel = parallel,
        .cache_mib = cache_mib,
        .no_prefix_cache = no_prefix_cache,
        .metrics_default = metrics,
        .metrics_vllm_names = metrics_compat != NULL,
        .otlp_endpoint = otlp,
        .api_keys = (const char *const *)ks.keys,
        .n_api_keys = ks.n,
        .cors_origins = cors.items,
        .n_cors_origins = cors.n,
        .no_webui = no_webui,
        .log_prompts = log_prompts,
        .log_json = !strcmp(log_format, "json"),
        .chat_template = tmpl,
        .special_tokens_in_messages = special_in_messages,
        .reasoning_format = reasoning,
        .max_body = (size_t)max_body,
        .max_queue = max_queue,
        .timeout_s = timeout,
        .request_timeout_s = request_timeout,
        .max_conns = max_conns,
        .shutdown_timeout_s = shutdown_timeout,
        .kv_events = ev,
    };
    const int status = ft_server_run(&cfg);
    key_set_free(&ks);
    ft_kv_events_free(ev); /* after the scheduler's last events */
    return status;
}
