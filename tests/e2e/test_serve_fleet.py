"""`ft serve` as a replica behind routers: the gauges an endpoint picker
reads (FreeToken's names, and vLLM's with --metrics-compat vllm), the
OpenTelemetry GenAI histograms, liveness vs readiness. /metrics is read
with prometheus_client's parser, the one a Python scraper uses."""
import pytest

from test_serve import Server, tiny_model
from conftest import ft_bin
import subprocess

openai = pytest.importorskip("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

ALIAS = 'tiny "llama" \\ q8'  # a model id that needs escaping in a label value


@pytest.fixture(scope="module")
def srv_vllm():
    s = Server(tiny_model(), "-c", "512", "--metrics-compat", "vllm", "--alias", ALIAS, "--api-key", "k")
    yield s
    assert s.stop() == 0, s.stderr()


def scrape(s, headers=None):
    status, hdrs, body = s.request("GET", "/metrics", headers=headers)
    assert status == 200, body
    return {f.name: f for f in prom_parser.text_string_to_metric_families(body.decode())}


def samples(fams, family, name=None, **labels):
    return [x for x in fams[family].samples
            if x.name == (name or family) and all(x.labels.get(k) == v for k, v in labels.items())]


def value(fams, family, name=None, **labels):
    got = samples(fams, family, name, **labels)
    assert len(got) == 1, (family, name, labels, got)
    return got[0].value


AUTH = {"Authorization": "Bearer k"}


def test_vllm_names_and_genai_histograms(srv_vllm):
    cl = srv_vllm.client(api_key="k")
    for i in range(2):
        r = cl.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": f"hi {i}"}], max_tokens=6,
                                       temperature=0, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 6
    r = cl.completions.create(model=ALIAS, prompt="The sky is", max_tokens=4, temperature=0,
                              extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 4
    f = scrape(srv_vllm, AUTH)
    lab = {"model_name": ALIAS}
    # The endpoint picker's three gauges, by type and meaning.
    for g in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
              "vllm:gpu_cache_usage_perc", "vllm:cache_config_info"):
        assert f[g].type == "gauge", g
    assert value(f, "vllm:num_requests_running", **lab) == 0
    assert value(f, "vllm:num_requests_waiting", **lab) == 0
    usage = value(f, "vllm:kv_cache_usage_perc", **lab)
    assert 0 < usage <= 1  # the prefix cache keeps the prompts' blocks
    assert usage == value(f, "ft_kv_cache_usage_ratio") == value(f, "vllm:gpu_cache_usage_perc", **lab)
    info = samples(f, "vllm:cache_config_info", **lab)
    assert len(info) == 1 and info[0].value == 1
    assert info[0].labels["block_size"] == "16"
    n_blocks = int(info[0].labels["num_gpu_blocks"])
    assert n_blocks > 0
    ft_info = samples(f, "ft_kv_cache_config_info")[0].labels
    assert ft_info == {"block_size": "16", "num_blocks": str(n_blocks)}
    # Counters and histograms carry the same observations as the ft_ names.
    assert value(f, "vllm:generation_tokens", "vllm:generation_tokens_total", **lab) == 16
    assert value(f, "vllm:prompt_tokens", "vllm:prompt_tokens_total", **lab) == \
        value(f, "ft_prompt_tokens", "ft_prompt_tokens_total")
    assert value(f, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total", **lab) == \
        value(f, "ft_prompt_tokens_cached", "ft_prompt_tokens_cached_total")
    ttft = "vllm:time_to_first_token_seconds"
    assert value(f, ttft, ttft + "_count", **lab) == 3
    assert value(f, ttft, ttft + "_bucket", le="+Inf", **lab) == 3
    assert value(f, ttft, ttft + "_sum", **lab) == value(f, "ft_time_to_first_token_seconds",
                                                          "ft_time_to_first_token_seconds_sum")
    tpot = "vllm:time_per_output_token_seconds"
    assert value(f, tpot, tpot + "_count", **lab) == 5 + 5 + 3  # one per token gap
    # OpenTelemetry GenAI server metrics, one series per operation.
    for op, n, gaps in (("chat", 2, 2), ("text_completion", 1, 1)):
        gl = {"gen_ai_operation_name": op, "gen_ai_request_model": ALIAS}
        for h in ("gen_ai_server_time_to_first_token_seconds", "gen_ai_server_request_duration_seconds"):
            assert f[h].type == "histogram"
            assert value(f, h, h + "_count", **gl) == n, (h, op)
        h = "gen_ai_server_time_per_output_token_seconds"
        assert value(f, h, h + "_count", **gl) == gaps  # one per request with a token after the first
        buckets = [s for s in samples(f, h, h + "_bucket", **gl)]
        assert buckets[-1].labels["le"] == "+Inf"
        assert [b.value for b in buckets] == sorted(b.value for b in buckets)  # cumulative
    # CPU-sized buckets beyond the conventions' last (10 s for TTFT).
    les = [s.labels["le"] for s in samples(f, "gen_ai_server_time_to_first_token_seconds",
                                           "gen_ai_server_time_to_first_token_seconds_bucket",
                                           gen_ai_operation_name="chat")]
    assert "10" in les and "320" in les


def test_ft_names_only_without_the_flag(srv_vllm):
    s = Server(tiny_model(), "-c", "256")
    try:
        f = scrape(s)
        assert not [n for n in f if n.startswith("vllm:")]
        assert f["ft_requests_waiting"].type == "gauge"
        assert f["gen_ai_server_request_duration_seconds"].type == "histogram"
    finally:
        assert s.stop() == 0, s.stderr()


def test_liveness_and_readiness(srv_vllm):
    # /livez answers 200 with no key; /metrics needs it.
    status, _, body = srv_vllm.request("GET", "/livez")
    assert status == 200 and b"alive" in body
    status, _, _ = srv_vllm.request("GET", "/metrics")
    assert status == 401
    # While the model loads, /livez is 200 and /health is not (a kubelet keeps the pod, the router sends nothing).
    s = Server(tiny_model(), "-c", "256", wait_ready=False)
    try:
        status, _, _ = s.request("GET", "/livez")
        assert status == 200
        s.wait_ready()
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0, s.stderr()


def test_bad_compat_name():
    r = subprocess.run([ft_bin(), "serve", "-m", str(tiny_model()), "--metrics-compat", "sglang"],
                       capture_output=True, timeout=60)
    assert r.returncode == 2
    assert b"--metrics-compat must be vllm" in r.stderr
