"""The official openai Node package (tests/e2e/node, installed by
scripts/setup.sh) against `ft serve` on the real Gemma 3 270M model: one
streamed tool call forced to a named function, and json_schema requests
whose answers must parse and validate (the `jsonschema` package is the
validator). The Python client's tests cover every feature; this one shows
a Node client's requests and stream parsing work the same way."""
import json
import shutil
import subprocess

import pytest

from conftest import ROOT
from test_serve import Server, model_id

jsonschema = pytest.importorskip("jsonschema")

NODE_DIR = ROOT / "tests" / "e2e" / "node"

WEATHER = {
    "type": "object",
    "properties": {"location": {"type": "string", "minLength": 1, "maxLength": 12},
                   "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["location", "unit"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather of a place",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "time of a place",
                                           "parameters": {"type": "object",
                                                          "properties": {"timezone": {"type": "string"}},
                                                          "required": ["timezone"]}}}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "city": {"enum": ["Paris", "Rome", "Oslo"]}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def node_srv(real_model):
    if shutil.which("node") is None or not (NODE_DIR / "node_modules" / "openai").is_dir():
        pytest.fail("node or the openai package is missing: run scripts/setup.sh")
    s = Server(real_model, "-c", "2048")
    yield s
    assert s.stop() == 0, s.stderr()


def node(srv, mode, **params):
    r = subprocess.run(["node", str(NODE_DIR / "openai_client.mjs"), f"http://127.0.0.1:{srv.port}/v1",
                        model_id(srv), mode, json.dumps(params)],
                       capture_output=True, text=True, timeout=300, cwd=NODE_DIR)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_node_streamed_forced_tool_call(node_srv):
    out = node(node_srv, "tool_stream", prompt="What is the weather like in Paris?", tools=TOOLS,
               name="get_weather")
    assert out["finish"] == "tool_calls" and out["content"] == "", out
    assert len(out["calls"]) == 1 and out["chunks"] > 3  # the arguments came in pieces
    call = out["calls"][0]
    assert call["id"] and call["name"] == "get_weather"
    jsonschema.validate(json.loads(call["arguments"]), WEATHER)
    assert out["usage"]["completion_tokens"] > 0
    assert out["metrics"]["ttft_ms"] > 0 and out["metrics"]["decode_tokens"] >= 1


@pytest.mark.parametrize("seed", range(3))
def test_node_json_schema_validates(node_srv, seed):
    out = node(node_srv, "json_schema", prompt="Describe a person as JSON.", schema=PERSON, seed=seed)
    assert out["finish"] == "stop", out
    jsonschema.validate(json.loads(out["content"]), PERSON)
