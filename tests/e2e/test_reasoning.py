"""End-to-end tests of reasoning_content in `ft serve`, with the official openai client.

The MoE reference models (qwen3moe-Q8_0, gpt-oss-Q8_0: random weights, an 8000-token
synthetic vocabulary, no chat template of their own) are served with the Qwen3, QwQ and
gpt-oss chat templates llama.cpp ships (tests/data/templates/llama.cpp/). Random weights
write no reasoning by themselves, so each answer is forced with a GBNF grammar (llama-server's
`grammar` field), spelled byte by byte by the real sampler: the text then goes through the
server's real path (detokenizer, reasoning parser, tool-call parser, chunks), as the tool-call
tests force calls. The parser's cases (markers split across tokens, unterminated reasoning, no
reasoning, ...) are in tests/unit/test_reasoning.c; here the server must return
message.reasoning_content apart from message.content, stream delta.reasoning_content before
delta.content without the markers, honour reasoning_format and --reasoning-format, and render
a previous turn's reasoning_content as llama.cpp does (tests/data/templates/reasoning/, made
with llama.cpp's own Jinja engine)."""
import json
import subprocess

import pytest

from conftest import ROOT, SHARED, ft_bin
from test_serve import Server

openai = pytest.importorskip("openai")

TEMPLATES = ROOT / "tests" / "data" / "templates"
QWEN3 = TEMPLATES / "llama.cpp" / "Qwen-Qwen3-0.6B.jinja"
QWQ = TEMPLATES / "llama.cpp" / "Qwen-QwQ-32B.jinja"
GPT_OSS = TEMPLATES / "llama.cpp" / "openai-gpt-oss-120b.jinja"
ASK = [{"role": "user", "content": "What is 2+2?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
          "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                         "required": ["location"]}}}]


def model(name):
    p = SHARED / "models" / f"{name}.gguf"
    if not p.exists():
        pytest.skip(f"{p} is absent")
    return p


def gbnf(text):
    """A grammar whose only sentence is text."""
    return "root ::= " + json.dumps(text)


def reasoning(msg):
    return (msg.model_extra or {}).get("reasoning_content")


def chat(srv, answer, stream=False, **kw):
    """The answer forced by a grammar; streamed: (reasoning deltas, content deltas, finish, chunks)."""
    c = srv.client()
    body = dict(grammar=gbnf(answer), **kw.pop("extra_body", {}))
    args = dict(model="m", messages=kw.pop("messages", ASK), max_tokens=kw.pop("max_tokens", 200),
                temperature=0, extra_body=body, **kw)
    if not stream:
        return c.chat.completions.create(**args)
    rs, cs, order, finish, usage = [], [], [], None, None
    for ch in c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args):
        if ch.usage:
            usage = ch.usage
        for choice in ch.choices:
            d = choice.delta
            r = (d.model_extra or {}).get("reasoning_content")
            if r:
                rs.append(r)
                order.append("r")
            if d.content:
                cs.append(d.content)
                order.append("c")
            finish = choice.finish_reason or finish
    return rs, cs, order, finish, usage


@pytest.fixture(scope="module")
def qwen3():
    s = Server(model("qwen3moe-Q8_0"), "--alias", "m", "-c", "2048", "--chat-template", QWEN3)
    yield s
    assert s.stop() == 0, s.stderr()


THINK = "<think>\nI add 2 and 2.\n</think>\n\nIt is 4."


def test_qwen3_reasoning_apart(qwen3):
    r = chat(qwen3, THINK)
    m = r.choices[0].message
    assert m.content == "It is 4."
    assert reasoning(m) == "I add 2 and 2."
    assert r.choices[0].finish_reason == "stop"


def test_qwen3_streamed_as_not_streamed(qwen3):
    rs, cs, order, finish, usage = chat(qwen3, THINK, stream=True)
    assert "".join(rs) == "I add 2 and 2." and "".join(cs) == "It is 4."
    assert order == sorted(order, key=lambda x: x != "r"), "reasoning deltas come before content deltas"
    assert len(rs) > 1, "the reasoning streams token by token"
    for piece in rs + cs:
        assert "<think>" not in piece and "</think>" not in piece
    assert finish == "stop"
    # reasoning tokens are completion tokens: the same count as the text kept whole
    plain = chat(qwen3, THINK, extra_body={"reasoning_format": "none"})
    assert usage.completion_tokens == plain.usage.completion_tokens


def test_qwen3_reasoning_format_none(qwen3):
    r = chat(qwen3, THINK, extra_body={"reasoning_format": "none"})
    assert r.choices[0].message.content == THINK
    assert reasoning(r.choices[0].message) is None
    rs, cs, _, _, _ = chat(qwen3, THINK, stream=True, extra_body={"reasoning_format": "none"})
    assert rs == [] and "".join(cs) == THINK
    r = chat(qwen3, THINK, extra_body={"reasoning_format": "deepseek"})
    assert r.choices[0].message.content == "It is 4." and reasoning(r.choices[0].message) == "I add 2 and 2."


def test_qwen3_no_reasoning(qwen3):
    r = chat(qwen3, "Four.")
    assert r.choices[0].message.content == "Four." and reasoning(r.choices[0].message) is None


def test_qwen3_cut_inside_the_reasoning(qwen3):
    r = chat(qwen3, "<think>\n" + "very long thoughts " * 20, max_tokens=12)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "length"
    assert not m.content
    assert reasoning(m).startswith("very long")
    rs, cs, _, finish, _ = chat(qwen3, "<think>\n" + "very long thoughts " * 20, max_tokens=12, stream=True)
    assert finish == "length" and cs == [] and "".join(rs) == reasoning(m)


def test_qwen3_metrics_unchanged(qwen3):
    r = chat(qwen3, THINK, extra_body={"performance_metrics": True})
    metrics = r.model_extra["metrics"]
    assert metrics["decode_tokens"] == r.usage.completion_tokens - 1
    assert metrics["prefill_tokens"] + metrics["cached_prompt_tokens"] == r.usage.prompt_tokens


def test_qwen3_bad_reasoning_format(qwen3):
    status, body = qwen3.post("/v1/chat/completions", {"messages": ASK, "reasoning_format": "loud"})
    assert status == 400 and body["error"]["param"] == "reasoning_format"
    status, body = qwen3.post("/v1/chat/completions", {"messages": [
        {"role": "user", "content": "x", "reasoning_content": "y"}]})
    assert status == 400 and body["error"]["param"] == "messages[0].reasoning_content"


def llamacpp_reasoning_case(name):
    return json.loads((TEMPLATES / "reasoning" / f"{name}.json").read_text())


def as_request(messages):
    """Tool-call arguments as the openai client sends them: JSON text."""
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        for tc in m.get("tool_calls", []):
            if not isinstance(tc["function"]["arguments"], str):
                tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"])
        out.append(m)
    return out


def test_qwen3_history_reasoning_rendered_as_llamacpp(qwen3):
    case = llamacpp_reasoning_case("Qwen-Qwen3-0.6B")
    req = case["request"]
    status, body = qwen3.post("/apply-template", {"messages": as_request(req["messages"]), "tools": req["tools"]})
    assert status == 200, body
    assert body["prompt"] == case["output"]
    assert "<think>\nI should call get_weather.\n</think>" in body["prompt"]


@pytest.fixture(scope="module")
def qwq():
    s = Server(model("qwen3moe-Q8_0"), "--alias", "m", "-c", "2048", "--chat-template", QWQ)
    yield s
    assert s.stop() == 0, s.stderr()


def test_qwq_prompt_opens_think(qwq):
    status, body = qwq.post("/apply-template", {"messages": ASK})
    assert status == 200 and body["prompt"].endswith("<|im_start|>assistant\n<think>\n")
    status, body = qwq.post("/apply-template", {"messages": ASK,
                                                "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200 and body["prompt"].endswith("<think>\n</think>")


def test_qwq_answer_starts_inside_the_reasoning(qwq):
    r = chat(qwq, "Two and two.\n</think>\n\nFour.")
    assert r.choices[0].message.content == "Four." and reasoning(r.choices[0].message) == "Two and two."
    rs, cs, _, _, _ = chat(qwq, "Two and two.\n</think>\n\nFour.", stream=True)
    assert "".join(rs) == "Two and two." and "".join(cs) == "Four."


@pytest.fixture(scope="module")
def oss():
    s = Server(model("gpt-oss-Q8_0"), "--alias", "m", "-c", "4096", "--chat-template", GPT_OSS)
    yield s
    assert s.stop() == 0, s.stderr()


HARMONY = ("<|channel|>analysis<|message|>The user wants 2+2.<|end|>"
           "<|start|>assistant<|channel|>final<|message|>2+2 = 4.")


def test_gpt_oss_analysis_apart(oss):
    status, body = oss.post("/apply-template", {"messages": ASK})
    assert status == 200 and body["prompt"].endswith("<|start|>assistant")
    r = chat(oss, HARMONY)
    m = r.choices[0].message
    assert m.content == "2+2 = 4." and reasoning(m) == "The user wants 2+2."
    rs, cs, order, finish, _ = chat(oss, HARMONY, stream=True)
    assert "".join(rs) == "The user wants 2+2." and "".join(cs) == "2+2 = 4." and finish == "stop"
    assert order == sorted(order, key=lambda x: x != "r")
    for piece in rs + cs:
        assert "<|" not in piece
    r = chat(oss, HARMONY, extra_body={"reasoning_format": "none"})
    assert r.choices[0].message.content == ("<|channel|>analysis<|message|>The user wants 2+2.<|end|>2+2 = 4.")


def test_gpt_oss_tool_call(oss):
    answer = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather"
              "<|channel|>commentary <|constrain|>json<|message|>{\"location\": \"Paris\"}")
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    r = chat(oss, answer, messages=msgs, tools=TOOLS)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert m.tool_calls[0].function.name == "get_weather"
    assert json.loads(m.tool_calls[0].function.arguments) == {"location": "Paris"}
    assert reasoning(m) == "Need the weather." and not m.content
    # streamed: the reasoning, then the call
    c = oss.client()
    rs, calls, finish = [], [], None
    for ch in c.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=200, temperature=0,
                                        stream=True, extra_body={"grammar": gbnf(answer)}):
        for choice in ch.choices:
            r_ = (choice.delta.model_extra or {}).get("reasoning_content")
            if r_:
                rs.append(r_)
            assert not choice.delta.content
            calls += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    assert "".join(rs) == "Need the weather." and finish == "tool_calls"
    assert calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"location": "Paris"}


def test_gpt_oss_history_thinking_rendered_as_llamacpp(oss):
    case = llamacpp_reasoning_case("openai-gpt-oss-120b")
    req = case["request"]
    status, body = oss.post("/apply-template", {"messages": as_request(req["messages"]), "tools": req["tools"]})
    assert status == 200, body
    # The system message carries today's date; the conversation after it is llama.cpp's byte for byte.
    cut = "<|start|>user<|message|>"
    assert body["prompt"][body["prompt"].index(cut):] == case["output"][case["output"].index(cut):]
    assert "<|channel|>analysis<|message|>I should call get_weather.<|end|>" in body["prompt"]


def test_server_flag():
    s = Server(model("qwen3moe-Q8_0"), "--alias", "m", "-c", "1024", "--chat-template", QWEN3,
               "--reasoning-format", "none")
    try:
        r = chat(s, THINK)
        assert r.choices[0].message.content == THINK and reasoning(r.choices[0].message) is None
        r = chat(s, THINK, extra_body={"reasoning_format": "auto"})  # the request's field wins
        assert r.choices[0].message.content == "It is 4." and reasoning(r.choices[0].message) == "I add 2 and 2."
    finally:
        assert s.stop() == 0, s.stderr()
    help_text = subprocess.run([ft_bin(), "serve", "--help"], capture_output=True, text=True)
    assert "--reasoning-format" in help_text.stdout + help_text.stderr
    bad = subprocess.run([ft_bin(), "serve", "--reasoning-format", "loud"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--reasoning-format" in bad.stderr
