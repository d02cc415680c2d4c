"""End-to-end tests of tools in `ft serve` with the official openai client.

The server runs the small llama model with Qwen 2.5's chat template (from
llama.cpp's models/templates, tests/data/templates/llama.cpp/). The prompts
it renders for requests with tools, a tool call and its result in the history,
and parallel calls are compared byte for byte with what llama.cpp renders for
the same conversations (tests/data/templates/expected/, made by generate.py
with llama.cpp's own Jinja engine), through POST /apply-template (llama-server's
endpoint). A tiny random model does not call tools by itself, so the parsing of
calls from model text is tested in tests/unit/test_tool_calls.c; here the
generation path with tools must answer in OpenAI's shapes, stream the same
text it returns without streaming, and refuse bad fields with a 400 naming them
while the server keeps serving."""
import json

import pytest

from conftest import ROOT
from test_serve import Server, tiny_model

openai = pytest.importorskip("openai")

TEMPLATES = ROOT / "tests" / "data" / "templates"
QWEN = "Qwen-Qwen2.5-7B-Instruct"
MODEL = "llama-Q8_0"  # the served model id (the file name without .gguf)


@pytest.fixture(scope="module")
def srv():
    s = Server(tiny_model(), "-c", "2048", "--chat-template", TEMPLATES / "llama.cpp" / f"{QWEN}.jinja")
    yield s
    assert s.stop() == 0, s.stderr()


def llamacpp_case(template, scenario):
    doc = json.loads((TEMPLATES / "expected" / f"{template}.json").read_text())
    return next(c for c in doc["cases"] if c["scenario"] == scenario)


def as_request(case):
    """The conversation of a case as an OpenAI client sends it: arguments as JSON strings."""
    msgs = []
    for m in case["context"]["messages"]:
        m = dict(m)
        if "tool_calls" in m:
            m["content"] = None
            m["tool_calls"] = [dict(tc, function=dict(tc["function"], arguments=tc["function"]["arguments"]
                                                      if isinstance(tc["function"]["arguments"], str)
                                                      else json.dumps(tc["function"]["arguments"])))
                               for tc in m["tool_calls"]]
        msgs.append(m)
    body = {"messages": msgs}
    if "tools" in case["context"]:
        body["tools"] = case["context"]["tools"]
    return body


@pytest.mark.parametrize("scenario", ["tools", "tools_no_system", "tool_result", "parallel_calls", "chat"])
def test_prompt_is_llamacpps(srv, scenario):
    case = llamacpp_case(QWEN, scenario)
    status, body = srv.post("/apply-template", as_request(case))
    assert status == 200, body
    assert body["prompt"] == case["output"]
    if "tools" in case["context"]:
        assert "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"" in body["prompt"]


def test_tool_choice_none_leaves_tools_out(srv):
    req = as_request(llamacpp_case(QWEN, "tools"))
    status, with_tools = srv.post("/apply-template", req)
    assert status == 200
    status, without = srv.post("/apply-template", dict(req, tool_choice="none"))
    assert status == 200
    assert "<tools>" in with_tools["prompt"] and "<tools>" not in without["prompt"]
    assert without["prompt"] == srv.post("/apply-template", {"messages": req["messages"]})[1]["prompt"]


def test_chat_with_tools_and_history(srv):
    c = srv.client()
    req = as_request(llamacpp_case(QWEN, "tool_result"))
    r = c.chat.completions.create(model=MODEL, messages=req["messages"], tools=req["tools"], tool_choice="auto",
                                  parallel_tool_calls=True, max_tokens=8, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length", "tool_calls")
    if ch.finish_reason == "tool_calls":
        assert ch.message.tool_calls and ch.message.tool_calls[0].id.startswith("call_")
    else:
        assert isinstance(ch.message.content, str) and ch.message.tool_calls is None
    # The tools are in the prompt the model saw: more prompt tokens than without them.
    bare = c.chat.completions.create(model=MODEL, messages=req["messages"][:2], max_tokens=1, temperature=0)
    with_tools = c.chat.completions.create(model=MODEL, messages=req["messages"][:2], tools=req["tools"], max_tokens=1,
                                           temperature=0)
    assert with_tools.usage.prompt_tokens > bare.usage.prompt_tokens + 100


def test_stream_with_tools_matches_non_stream(srv):
    c = srv.client()
    req = as_request(llamacpp_case(QWEN, "tools"))
    args = dict(model=MODEL, messages=req["messages"], tools=req["tools"], max_tokens=24, temperature=0, seed=1)
    whole = c.chat.completions.create(**args).choices[0]
    content, calls, finish = "", {}, None
    for chunk in c.chat.completions.create(stream=True, **args):
        for ch in chunk.choices:
            if ch.delta.content:
                content += ch.delta.content
            for tc in ch.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                if tc.id:
                    entry["id"], entry["name"] = tc.id, tc.function.name
                entry["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    assert finish == whole.finish_reason
    if whole.message.tool_calls:
        assert [(v["name"], v["arguments"]) for _, v in sorted(calls.items())] == \
               [(t.function.name, t.function.arguments) for t in whole.message.tool_calls]
    else:
        assert content == (whole.message.content or "") and not calls


@pytest.mark.parametrize("extra, param", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools[0].function.strict"),
    ({"messages": [{"role": "tool", "content": "18C"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
])
def test_bad_tool_fields_are_400_naming_the_field(srv, extra, param):
    c = srv.client()
    base = {"messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}
    base.update(extra)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL, max_tokens=1, **base)
    assert e.value.status_code == 400
    assert e.value.body["param"] == param, e.value.body
    # and the server keeps serving
    assert c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                     max_tokens=1).choices[0].finish_reason in ("stop", "length")


def test_apply_template_rejects_what_chat_rejects(srv):
    status, body = srv.post("/apply-template", {"messages": []})
    assert status == 400 and body["error"]["param"] == "messages"
    status, body = srv.post("/apply-template", {"messages": [{"role": "user", "content": "x"}],
                                                "tool_choice": "required"})
    assert status == 400 and body["error"]["param"] == "tool_choice"  # without tools


def test_forced_call_on_a_random_model(srv):
    """Even a model of random weights answers a forced call with a call of
    the named tool whose arguments follow its schema (the grammar's work;
    tests/e2e/test_serve_tools_forced.py does this on Gemma in each format)."""
    c = srv.client()
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer",
                                                                                  "minimum": 1, "maximum": 9}},
        "required": ["city", "days"], "additionalProperties": False}}},
             {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    for stream in (False, True):
        args = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=tools, max_tokens=200,
                    temperature=0, parallel_tool_calls=False,
                    tool_choice={"type": "function", "function": {"name": "get_weather"}})
        if stream:
            name, arguments, finish = None, "", None
            for chunk in c.chat.completions.create(stream=True, **args):
                for ch in chunk.choices:
                    for tc in ch.delta.tool_calls or []:
                        name = tc.function.name or name
                        arguments += tc.function.arguments or ""
                    finish = ch.finish_reason or finish
        else:
            ch = c.chat.completions.create(**args).choices[0]
            finish, name, arguments = ch.finish_reason, ch.message.tool_calls[0].function.name, \
                ch.message.tool_calls[0].function.arguments
        assert finish == "tool_calls" and name == "get_weather"
        a = json.loads(arguments)
        assert set(a) == {"city", "days"} and a["city"] in ("Paris", "Rome") and 1 <= a["days"] <= 9, a
