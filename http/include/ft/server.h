/* The OpenAI-compatible HTTP server (http/, docs/architecture.md, The request
 * path): what `ft serve` configures and runs. */
#ifndef FT_SERVER_H
#define FT_SERVER_H

#include "ft/model.h"
#include "ft/reasoning.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ft_kv_events;

struct ft_server_config {
    const char *model_path;
    const char *model_alias;        /* id in responses and /v1/models; NULL: the file name */
    const char *host;               /* "127.0.0.1" unless the user says otherwise */
    int port;                       /* 0: any free port (printed) */
    struct ft_model_params model;   /* threads and NUMA placement (-t, --numa) */
    int32_t n_ctx;                  /* <= 0: the model's, capped by memory */
    int32_t n_batch;                /* tokens per scheduler step (--batch-tokens) */
    int32_t parallel;               /* requests generated at once (--parallel), capped by memory */
    int32_t cache_mib;              /* KV memory kept for the prefix cache beyond the running requests' */
    bool no_prefix_cache;
    bool metrics_default;           /* --enable-performance-metrics */
    bool metrics_vllm_names;        /* --metrics-compat vllm: /metrics adds vLLM's names */
    const char *otlp_endpoint;      /* --otlp-endpoint: export a span per request there; NULL: none */
    const char *const *api_keys;    /* accepted keys (n_api_keys; 0: no authentication) */
    int n_api_keys;
    const char *const *cors_origins; /* origins browsers may call from ("*": any); 0: CORS off */
    int n_cors_origins;
    bool no_webui;                  /* --no-webui: no pages at / and /dashboard (http/webui.h) */
    bool log_prompts;               /* the access log carries each request's messages / prompt */
    bool log_json;                  /* access log as JSON lines */
    const char *chat_template;      /* a file or a built-in name; overrides the model's template */
    bool special_tokens_in_messages; /* message text may become control tokens (llama-server's behaviour) */
    enum ft_reasoning_format reasoning_format; /* --reasoning-format: requests' default (auto: separate reasoning
                                                  when the template has a syntax) */
    size_t max_body;                /* request body limit in bytes */
    int32_t max_queue;              /* waiting requests at most (503 beyond) */
    int timeout_s;                  /* idle connection / stalled write timeout; generation has none */
    int request_timeout_s;          /* a request head from its first byte, a stalled body */
    int max_conns;                  /* client connections open at once (the longest idle one makes room) */
    int shutdown_timeout_s;         /* SIGTERM: in-flight requests get this long before they are cancelled */
    struct ft_kv_events *kv_events; /* --kv-events: the prefix cache's events go there; NULL: none. The
                                       caller frees it after ft_server_run returns */
};

/* Listen, load the model in the background (GET /health answers 503 until
 * it is ready; GET /livez answers 200 throughout), serve until SIGINT or SIGTERM, then drain: no new
 * connections, requests in flight finish (cancelled after
 * shutdown_timeout_s, or at a second signal). Returns the process exit
 * status: 0 after a signal, 1 if the model or the socket failed (one error
 * line on stderr). */
int ft_server_run(const struct ft_server_config *cfg);

#endif
