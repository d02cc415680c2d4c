"""Forced and strict tool calls end to end, on the real Gemma 3 270M model
with the official openai client: tool_choice "required", a named function,
and `strict: true` under "auto", in each parsed format. The server runs
Gemma with four chat templates: its own (which says nothing about tools, so
the generic JSON format), Qwen 2.5's (hermes), Llama 3.1's (llama3) and
Mistral Nemo's (mistral). Whatever the model wanted to write, a forced
answer must come back as message.tool_calls of an offered tool whose
arguments validate against that tool's parameters (the `jsonschema` package
is the validator), streamed or not, with finish_reason "tool_calls"."""
import json

import pytest

from conftest import ROOT
from test_serve import Server, model_id

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

TEMPLATES = ROOT / "tests" / "data" / "templates" / "llama.cpp"
FORMATS = {
    "generic": None,
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "llama3": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
}

WEATHER = {
    "type": "object",
    "properties": {"location": {"type": "string", "minLength": 1, "maxLength": 12},
                   "unit": {"$ref": "#/$defs/unit"}},
    "required": ["location", "unit"],
    "additionalProperties": False,
    "$defs": {"unit": {"enum": ["celsius", "fahrenheit"]}},
}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"},
                   "hour24": {"type": "boolean"}},
    "required": ["timezone", "hour24"],
    "additionalProperties": False,
}
PARAMS = {"get_weather": WEATHER, "get_time": TIME}


def tools(strict=False):
    return [{"type": "function", "function": {"name": n, "description": f"{n.replace('_', ' ')} of a place",
                                              "parameters": p, "strict": strict}} for n, p in PARAMS.items()]


MSGS = [{"role": "user", "content": "What is the weather like in Paris, and what time is it there?"}]


@pytest.fixture(scope="module", params=list(FORMATS))
def fmt_srv(request, real_model):
    tpl = FORMATS[request.param]
    args = ["-c", "2048", "--parallel", "2"] + (["--chat-template", TEMPLATES / tpl] if tpl else [])
    s = Server(real_model, *args)
    yield request.param, s
    assert s.stop() == 0, s.stderr()


def check_calls(calls, allowed):
    """Every call names an offered tool and its arguments validate; returns the names."""
    names = []
    for c in calls:
        name, args = c["name"], json.loads(c["arguments"])
        assert name in allowed, name
        jsonschema.validate(args, PARAMS[name])
        names.append(name)
    return names


def collect_stream(stream):
    content, calls, finish = "", {}, None
    for chunk in stream:
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                e = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                if tc.id:
                    e["id"], e["name"] = tc.id, tc.function.name
                e["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_forced_call_validates_streamed_and_not(fmt_srv, choice):
    fmt, srv = fmt_srv
    c = srv.client()
    tc = choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    allowed = list(PARAMS) if choice == "required" else [choice]
    args = dict(model=model_id(srv), messages=MSGS, tools=tools(), tool_choice=tc, parallel_tool_calls=False,
                max_tokens=200, temperature=0)
    r = c.chat.completions.create(**args)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", (fmt, ch.message.content)
    assert ch.message.content is None and len(ch.message.tool_calls) == 1
    calls = [{"name": t.function.name, "arguments": t.function.arguments} for t in ch.message.tool_calls]
    check_calls(calls, allowed)
    assert ch.message.tool_calls[0].id
    content, streamed, finish = collect_stream(c.chat.completions.create(stream=True, **args))
    assert finish == "tool_calls" and content == ""
    assert [(s["name"], s["arguments"]) for s in streamed] == [(x["name"], x["arguments"]) for x in calls]


def test_required_with_parallel_calls(fmt_srv):
    """One or more calls. Gemma 270M repeats calls forever when it may
    (each is valid, so the grammar lets it go on): banning the "}}," token
    it continues a list with (llama.cpp's text key: the server tokenizes
    it) and a bias on its end-of-turn tokens, which the grammar allows only
    after a whole call, let it stop."""
    fmt, srv = fmt_srv
    c = srv.client()
    args = dict(model=model_id(srv), messages=MSGS, tools=tools(), tool_choice="required", max_tokens=300,
                temperature=0, logit_bias={"}},": -100, "1": 8, "106": 8})
    ch = c.chat.completions.create(**args).choices[0]
    assert ch.finish_reason == "tool_calls", (fmt, ch.message.content)
    names = check_calls([{"name": t.function.name, "arguments": t.function.arguments}
                         for t in ch.message.tool_calls], list(PARAMS))
    assert len(names) >= 1
    _, streamed, finish = collect_stream(c.chat.completions.create(stream=True, **args))
    assert finish == "tool_calls" and [s["name"] for s in streamed] == names


def test_strict_auto_generic_answers_json(real_model):
    """Generic format, strict tools, tool_choice auto: the answer is always
    the format's JSON (a call whose arguments validate, or a response that
    comes back as content), never free text or a malformed call."""
    s = Server(real_model, "-c", "2048")
    try:
        c = s.client()
        kinds = set()
        for seed in range(4):
            ch = c.chat.completions.create(model=model_id(s), messages=MSGS, tools=tools(strict=True), seed=seed,
                                           max_tokens=200, temperature=0.8).choices[0]
            if ch.finish_reason == "tool_calls":
                check_calls([{"name": t.function.name, "arguments": t.function.arguments}
                             for t in ch.message.tool_calls], list(PARAMS))
                kinds.add("call")
            else:
                assert ch.finish_reason == "stop", ch.finish_reason
                # the {"response": ...} string, not JSON text
                assert isinstance(ch.message.content, str) and not ch.message.content.lstrip().startswith("{")
                kinds.add("response")
        assert kinds
    finally:
        assert s.stop() == 0, s.stderr()


def test_strict_auto_lazy_grammar_from_the_marker(real_model):
    """Hermes format, strict tools, tool_choice auto: the model writes text
    or calls; the grammar starts at "<tool_call>". A small bias on the
    marker's tokens makes Gemma open a call; the call's arguments must then
    validate (location at most 12 characters, unit one of two)."""
    s = Server(real_model, "-c", "2048", "--chat-template", TEMPLATES / FORMATS["hermes"])
    try:
        c = s.client()
        args = dict(model=model_id(s), messages=MSGS, tools=tools(strict=True), parallel_tool_calls=False,
                    max_tokens=200, temperature=0, logit_bias={"<tool_call>": 5})
        ch = c.chat.completions.create(**args).choices[0]
        assert ch.finish_reason == "tool_calls", ch.message.content
        calls = [{"name": t.function.name, "arguments": t.function.arguments} for t in ch.message.tool_calls]
        check_calls(calls, list(PARAMS))
        _, streamed, finish = collect_stream(c.chat.completions.create(stream=True, **args))
        assert finish == "tool_calls"
        assert [(x["name"], x["arguments"]) for x in streamed] == [(x["name"], x["arguments"]) for x in calls]
    finally:
        assert s.stop() == 0, s.stderr()


BAD = [
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}, "guided_choice": ["a"]}, "guided_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}]}, "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True,
                                                  "parameters": {"type": "string"}}}]}, "tools[0].function.parameters"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
]


def test_conflicts_and_bad_schemas_are_400(fmt_srv):
    fmt, srv = fmt_srv
    if fmt != "generic":
        pytest.skip("format-independent refusals: checked on one server")
    c = srv.client()
    for extra, param in BAD:
        body = dict(tools=tools())
        body.update(extra)
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=model_id(srv), messages=MSGS, max_tokens=4, extra_body=body)
        assert e.value.status_code == 400 and e.value.body["param"] == param, e.value.body
        # and the server keeps serving
        assert c.chat.completions.create(model=model_id(srv), messages=MSGS, max_tokens=2).choices[0].finish_reason
