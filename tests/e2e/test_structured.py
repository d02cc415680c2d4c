"""Structured output end to end: response_format json_object and json_schema,
llama.cpp's `grammar` (GBNF) and `json_schema`, vLLM's `guided_json`, on the
real Gemma 3 270M model with the official openai client. Every response must
parse and validate against its schema (the `jsonschema` package is the
validator); schemas the engine cannot enforce are a 400 that names the
keyword, and the server keeps serving after them."""
import json

import pytest

from test_serve import Server, model_id

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["engineer", "artist", "doctor", "farmer"]},
        "email": {"anyOf": [{"type": "string", "pattern": "^[a-z]{1,12}@[a-z]{1,12}\\.(com|org)$"},
                            {"type": "null"}]},
        "height_m": {"type": "number", "minimum": 0.5, "maximum": 2.5},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
        "address": {"$ref": "#/$defs/address"},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "email", "height_m", "tags", "address", "active"],
    "additionalProperties": False,
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        }
    },
}

MSGS = [{"role": "user", "content": "Invent a person and describe them as a JSON object."}]


@pytest.fixture(scope="module")
def gemma(real_model):
    s = Server(real_model, "-c", "2048", "--parallel", "2")
    yield s
    assert s.stop() == 0, s.stderr()


def fmt(schema, name="person"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def test_json_schema_validates_20_of_20_non_streamed(gemma):
    cl = gemma.client()
    ok = 0
    for seed in range(20):
        r = cl.chat.completions.create(model=model_id(gemma), messages=MSGS, seed=seed, max_tokens=400,
                                       response_format=fmt(PERSON))
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", text
        jsonschema.validate(json.loads(text), PERSON)
        ok += 1
    assert ok == 20


def test_json_schema_validates_20_of_20_streamed(gemma):
    cl = gemma.client()
    texts = set()
    for seed in range(100, 120):
        stream = cl.chat.completions.create(model=model_id(gemma), messages=MSGS, seed=seed, max_tokens=400,
                                            response_format=fmt(PERSON), stream=True)
        parts, finish = [], None
        for ch in stream:
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
            if ch.choices and ch.choices[0].finish_reason:
                finish = ch.choices[0].finish_reason
        text = "".join(parts)
        assert finish == "stop", text
        jsonschema.validate(json.loads(text), PERSON)
        texts.add(text)
    assert len(texts) > 10  # the seeds sample different documents, not one forced answer


def test_json_object(gemma):
    cl = gemma.client()
    for seed in range(3):
        r = cl.chat.completions.create(model=model_id(gemma), seed=seed, max_tokens=300,
                                       messages=[{"role": "user", "content": "Describe Paris as JSON."}],
                                       response_format={"type": "json_object"})
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)
        else:  # a generic object may be long: what came is still a prefix of one
            assert r.choices[0].message.content.lstrip().startswith("{")


def test_completions_endpoint_and_llama_server_fields(gemma):
    cl = gemma.client()
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "confidence":
                                               {"type": "integer", "minimum": 1, "maximum": 5}},
              "required": ["answer", "confidence"], "additionalProperties": False}
    for extra in ({"response_format": fmt(schema, "answer")}, {"json_schema": schema}, {"guided_json": schema},
                  {"guided_json": json.dumps(schema)}):
        r = cl.completions.create(model=model_id(gemma), prompt="Is the sky blue? Answer in JSON: ", max_tokens=60,
                                  seed=3, extra_body=extra)
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].text), schema)


def test_gbnf_grammar(gemma):
    cl = gemma.client()
    g = 'root ::= answer " because " reason "."\nanswer ::= "yes" | "no"\nreason ::= [a-z ]{1,40}'
    for seed in range(3):
        r = cl.chat.completions.create(model=model_id(gemma), seed=seed, max_tokens=60, messages=MSGS,
                                       extra_body={"grammar": g})
        t = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", t
        head, _, rest = t.partition(" because ")
        assert head in ("yes", "no") and rest.endswith(".") and 1 <= len(rest) - 1 <= 40, t
        assert set(rest[:-1]) <= set("abcdefghijklmnopqrstuvwxyz "), t


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "object", "not": {"type": "null"}}, "'not'"),
    ({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}, "'uniqueItems'"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "'patternProperties'"),
    ({"type": "string", "format": "email"}, "'format'"),
    ({"type": "object", "properties": {"x": {"type": "string", "if": {}}}}, "'if' at #/properties/x"),
])
def test_unsupported_keyword_is_400_naming_it(gemma, schema, keyword):
    cl = gemma.client()
    with pytest.raises(openai.BadRequestError) as e:
        cl.chat.completions.create(model=model_id(gemma), messages=MSGS, max_tokens=8, response_format=fmt(schema))
    err = e.value.body
    assert keyword in err["message"], err
    assert err["param"] == "response_format.json_schema.schema", err
    assert err["type"] == "invalid_request_error", err


@pytest.mark.parametrize("body,param,needle", [
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "Missing required parameter"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format.json_schema.name",
     "Missing required parameter"),
    ({"response_format": {"type": "yaml"}}, "response_format.type", "must be one of"),
    ({"grammar": "root ::= root \"a\" | \"b\""}, "grammar", "left-recursive"),
    ({"grammar": "root ::= undefined"}, "grammar", "not defined"),
    ({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, "grammar", "give one of them"),
    ({"json_schema": {"$ref": "#/$defs/nowhere"}}, "json_schema", "does not resolve"),
    ({"guided_json": "{not json"}, "guided_json", "not JSON"),
    ({"response_format": fmt({"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}, "required": ["a"]})},
     "response_format.json_schema.schema", "refers to itself"),
])
def test_bad_structured_requests_are_400(gemma, body, param, needle):
    status, resp = gemma.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, **body})
    assert status == 400, resp
    assert resp["error"]["param"] == param and needle in resp["error"]["message"], resp


def test_hostile_schemas_are_refused_quickly_and_server_keeps_serving(gemma):
    deep = {}
    cur = deep
    for _ in range(200):
        cur["type"] = "array"
        cur["items"] = {}
        cur = cur["items"]
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    big_repeat = {"type": "array", "items": {"type": "string", "minLength": 100000}}
    for schema, needle in ((deep, "deeper"), (wide, "1024 properties"), (big_repeat, "minLength")):
        status, resp = gemma.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 4,
                                                           "response_format": fmt(schema)})
        assert status == 400 and needle in resp["error"]["message"], resp
    # exponential alternatives in a GBNF grammar are bounded, not a hang
    g = "root ::= " + " ".join(['("a" | "a")'] * 64)
    status, resp = gemma.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 8, "grammar": g})
    assert status in (200, 500), resp
    r = gemma.client().chat.completions.create(model=model_id(gemma), messages=MSGS, max_tokens=4)
    assert r.choices[0].finish_reason in ("stop", "length")


def test_n_choices_and_logprobs_with_a_schema(gemma):
    """n > 1 gives each choice its own matcher (all validate); logprobs are the
    model's, before the mask: each sampled token's logprob is <= 0 and the
    top alternatives may include tokens the grammar forbade."""
    cl = gemma.client()
    r = cl.chat.completions.create(model=model_id(gemma), messages=MSGS, seed=7, max_tokens=400, n=2,
                                   temperature=1.0, logprobs=True, top_logprobs=3, response_format=fmt(PERSON))
    assert len(r.choices) == 2
    assert sorted(c.index for c in r.choices) == [0, 1]
    for c in r.choices:
        assert c.finish_reason == "stop", c.message.content
        jsonschema.validate(json.loads(c.message.content), PERSON)
        toks = c.logprobs.content
        assert "".join(t.token for t in toks) == c.message.content
        for t in toks:
            assert t.logprob <= 0.0 and len(t.top_logprobs) == 3
            assert t.top_logprobs[0].logprob >= t.logprob - 1e-6
    assert r.usage.completion_tokens == sum(len(c.logprobs.content) for c in r.choices)
