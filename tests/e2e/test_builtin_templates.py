"""Chat templates for models without tokenizer.chat_template: "plain" by
default (base models), and each family's built-in by `--chat-template NAME`
(engine/text/chat_template.c).

The synthetic models in ../shared/models have no template and the Llama
SentencePiece vocabulary (no <|eot_id|>, so "llama" means Llama 2). Each
conversation's expected prompt is the family's official template written
out by hand here; `ft tokenize` counts its tokens, and the server's
usage.prompt_tokens must match (one BOS: the template's or the vocabulary's)."""
import subprocess
import sys

import pytest

from conftest import ROOT, SHARED, ft_bin

sys.path.insert(0, str(ROOT / "bench"))
import serve_client  # noqa: E402

MODELS = SHARED / "models"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
# bos_token of this vocabulary is <s>.
LLAMA2 = "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello [/INST]"
CHATML = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
GEMMA = "<s><start_of_turn>user\nBe brief.\n\nHello<end_of_turn>\n<start_of_turn>model\n"


def model(name):
    p = MODELS / f"{name}.gguf"
    if not p.exists():
        pytest.skip(f"{p} is absent: the small models come with ../shared")
    return p


def token_count(path, text, add_bos):
    args = [ft_bin(), "tokenize", "-m", str(path), "--parse-special"] + (["--add-special"] if add_bos else [])
    ids = subprocess.run(args, input=text.encode(), capture_output=True, timeout=60, check=True).stdout.split()
    assert ids.count(b"1") == 1 and ids[0] == b"1", ids  # exactly one BOS, first
    return len(ids)


def chat_prompt_tokens(path, *args, cwd=None):
    s = serve_client.Server(ft_bin(), ["-m", str(path), "-c", "256", "-t", "1", *args], cwd=cwd)
    try:
        status, r, _ = serve_client.post_json(s.host, s.port, "/v1/chat/completions",
                                              {"messages": MESSAGES, "max_tokens": 2, "temperature": 0})
        assert status == 200, r
        assert r["choices"][0]["finish_reason"] in ("stop", "length")
    finally:
        assert s.stop() == 0, s.stderr()
    return r["usage"]["prompt_tokens"], s.stderr()


def test_plain_by_default():
    path = model("llama-Q8_0")
    n, err = chat_prompt_tokens(path)
    assert "no tokenizer.chat_template (a base model): chat messages are sent as plain text" in err
    assert n == token_count(path, "<s>Be brief.\n\nHello", add_bos=False)


@pytest.mark.parametrize("name, builtin, text, template_writes_bos", [
    ("llama-Q8_0", "llama2", LLAMA2, True),
    ("qwen2-Q8_0", "chatml", CHATML, False),
    ("qwen3-F16", "chatml", CHATML, False),
    ("gemma3-Q8_0", "gemma", GEMMA, True),
])
def test_builtin_by_name(name, builtin, text, template_writes_bos):
    path = model(name)
    n, err = chat_prompt_tokens(path, "--chat-template", builtin)
    assert "no tokenizer.chat_template" not in err
    assert n == token_count(path, text, add_bos=not template_writes_bos)


def test_chat_template_by_name(tmp_path):
    path = model("llama-Q8_0")
    n, err = chat_prompt_tokens(path, "--chat-template", "chatml")
    assert "no tokenizer.chat_template" not in err
    assert n == token_count(path, CHATML, add_bos=True)
    # A file of that name wins over the built-in.
    (tmp_path / "chatml").write_text("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    n, _ = chat_prompt_tokens(path, "--chat-template", "chatml", cwd=tmp_path)
    assert n == token_count(path, "Be brief.\nHello\n", add_bos=True)


def test_chat_template_unknown_name(tmp_path):
    p = subprocess.run([ft_bin(), "serve", "-m", str(model("llama-Q8_0")), "--port", "0", "--chat-template",
                        "vicuna"], capture_output=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 1
    assert b"vicuna: no such file, and no built-in template has that name (plain, gemma, chatml" in p.stderr, p.stderr


def test_help_names_builtins():
    out = subprocess.run([ft_bin(), "serve", "--help"], capture_output=True, timeout=60).stdout.decode()
    line = next(l for l in out.splitlines() if "--chat-template" in l)
    for name in ("plain", "gemma", "chatml", "llama3", "llama2", "mistral"):
        assert name in line
