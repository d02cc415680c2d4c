"""`ft serve --otlp-endpoint`: one OpenTelemetry span per request over
OTLP/HTTP. The receiver here decodes every export with opentelemetry-proto's
own ExportTraceServiceRequest (json_format rejects any field the protocol
does not define), as a collector would."""
import base64
import http.server
import json
import subprocess
import threading

import pytest

from conftest import ft_bin
from test_serve import Server, tiny_model

openai = pytest.importorskip("openai")
trace_pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
json_format = pytest.importorskip("google.protobuf.json_format")


ID_LEN = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def otlp_ids_to_proto_json(doc):
    """OTLP's JSON encoding writes trace and span ids as lowercase hex where
    protobuf's JSON mapping has base64 (the one difference the OTLP spec
    makes): check the hex, convert, so json_format can parse the rest."""
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k in ID_LEN:
                assert isinstance(v, str) and len(v) == ID_LEN[k] and v == v.lower(), (k, v)
                v = base64.b64encode(bytes.fromhex(v)).decode()
            out[k] = otlp_ids_to_proto_json(v)
        return out
    if isinstance(doc, list):
        return [otlp_ids_to_proto_json(x) for x in doc]
    return doc


class Receiver:
    """An OTLP/HTTP trace receiver on a loopback port. With hold set, it
    takes the request but answers only once hold is cleared (a stuck
    collector)."""

    def __init__(self):
        self.spans = []
        self.posts = 0
        self.paths = []
        self.hold = threading.Event()
        self.released = threading.Event()
        self.got_post = threading.Event()
        rx = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                rx.paths.append(self.path)
                rx.got_post.set()
                if rx.hold.is_set():
                    rx.released.wait(60)
                req = trace_pb.ExportTraceServiceRequest()
                json_format.Parse(json.dumps(otlp_ids_to_proto_json(json.loads(body))), req)  # strict
                assert self.headers["Content-Type"] == "application/json"
                for rs in req.resource_spans:
                    res = {a.key: a.value.string_value for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            rx.spans.append((res, sp))
                rx.posts += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.released.set()
        self.httpd.shutdown()


def attrs(span):
    out = {}
    for a in span.attributes:
        v = a.value
        kind = v.WhichOneof("value")
        out[a.key] = [x.string_value for x in v.array_value.values] if kind == "array_value" else getattr(v, kind)
    return out


def test_one_span_per_request_with_genai_attributes():
    rx = Receiver()
    s = Server(tiny_model(), "-c", "512", "--otlp-endpoint", f"http://127.0.0.1:{rx.port}", "--alias", "tiny",
               "--enable-performance-metrics")
    try:
        cl = s.client()
        parent_trace, parent_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        r1 = cl.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                        temperature=0, extra_body={"ignore_eos": True},
                                        extra_headers={"traceparent": f"00-{parent_trace}-{parent_span}-01"})
        r2 = cl.completions.create(model="tiny", prompt="The sky", max_tokens=3, temperature=0.5, top_p=0.9,
                                   stream=True, extra_body={"ignore_eos": True},
                                   extra_headers={"traceparent": "00-zz-bad-01"})
        list(r2)
        status, _ = s.post("/v1/chat/completions", {"messages": []})  # refused before the engine: no span
        assert status == 400
    finally:
        assert s.stop() == 0, s.stderr()  # shutdown flushes the queue
        rx.close()
    assert rx.paths and set(rx.paths) == {"/v1/traces"}
    assert len(rx.spans) == 2, [sp.name for _, sp in rx.spans]
    by_op = {attrs(sp)["gen_ai.operation.name"]: (res, sp) for res, sp in rx.spans}
    res, chat = by_op["chat"]
    assert res["service.name"] == "freetoken"
    a = attrs(chat)
    assert chat.name == "chat tiny"
    assert chat.kind == 2  # SERVER
    assert chat.trace_id.hex() == parent_trace and chat.parent_span_id.hex() == parent_span
    assert len(chat.span_id) == 8 and chat.span_id.hex() != parent_span
    assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "tiny"
    assert a["gen_ai.response.id"] == r1.id
    assert a["gen_ai.usage.input_tokens"] == a["gen_ai.usage.prompt_tokens"] == r1.usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == a["gen_ai.usage.completion_tokens"] == 5
    assert a["gen_ai.response.finish_reasons"] == ["length"]
    assert a["gen_ai.request.max_tokens"] == 5 and a["gen_ai.request.temperature"] == 0
    m = r1.model_extra["metrics"]
    assert a["gen_ai.latency.time_to_first_token"] == pytest.approx(m["ttft_ms"] / 1e3, rel=1e-9)
    assert a["gen_ai.latency.time_in_queue"] == pytest.approx(m["queue_time_ms"] / 1e3, rel=1e-9)
    assert a["gen_ai.latency.e2e"] == pytest.approx(m["total_time_ms"] / 1e3, rel=1e-9)
    assert a["gen_ai.latency.time_in_model_decode"] == pytest.approx(m["decode_time_ms"] / 1e3, rel=1e-9)
    assert a["http.response.status_code"] == 200
    dur = (chat.end_time_unix_nano - chat.start_time_unix_nano) / 1e9
    assert dur == pytest.approx(a["gen_ai.latency.e2e"], abs=0.05)
    _, comp = by_op["text_completion"]
    b = attrs(comp)
    assert comp.name == "text_completion tiny"
    assert len(comp.parent_span_id) == 0 and len(comp.trace_id) == 16  # bad traceparent: a new trace
    assert comp.trace_id.hex() != parent_trace
    assert b["gen_ai.request.stream"] is True and b["gen_ai.usage.output_tokens"] == 3
    assert b["gen_ai.request.top_p"] == pytest.approx(0.9, rel=1e-6)


def test_a_stuck_collector_never_holds_a_request():
    """The collector takes the first export and does not answer: requests
    go on completing meanwhile (spans wait in the queue), and once it
    answers again every span arrives."""
    rx = Receiver()
    rx.hold.set()
    s = Server(tiny_model(), "-c", "512", "--otlp-endpoint", f"http://127.0.0.1:{rx.port}/custom/path")
    try:
        cl = s.client()
        model = cl.models.list().data[0].id
        cl.chat.completions.create(model=model, messages=[{"role": "user", "content": "a"}], max_tokens=2)
        assert rx.got_post.wait(30)  # the exporter's POST is now stuck in the collector
        for i in range(6):  # all complete although the exporter is blocked
            r = cl.chat.completions.create(model=model, messages=[{"role": "user", "content": f"b{i}"}],
                                           max_tokens=4, stream=True)
            assert sum(1 for _ in r) > 0
        assert rx.posts == 0 and not rx.released.is_set()
        rx.released.set()
    finally:
        assert s.stop() == 0, s.stderr()
        rx.close()
    assert set(rx.paths) == {"/custom/path"}
    assert len(rx.spans) == 7


def test_dead_collector_counts_failures():
    rx = Receiver()
    port = rx.port
    rx.close()  # nothing listens there any more
    s = Server(tiny_model(), "-c", "256", "--otlp-endpoint", f"http://127.0.0.1:{port}")
    try:
        cl = s.client()
        model = cl.models.list().data[0].id
        for i in range(3):
            cl.chat.completions.create(model=model, messages=[{"role": "user", "content": f"x{i}"}], max_tokens=2)
        import time
        deadline = time.time() + 30
        while time.time() < deadline:
            text = s.request("GET", "/metrics")[2].decode()
            vals = {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l.startswith("ft_otlp_")}
            if vals.get("ft_otlp_spans_dropped_total", 0) >= 3:
                break
            time.sleep(0.2)
        assert vals["ft_otlp_spans_dropped_total"] == 3 and vals["ft_otlp_spans_exported_total"] == 0
        assert vals["ft_otlp_export_failures_total"] >= 1
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("url", ["https://127.0.0.1:4318", "127.0.0.1:4318", "http://", "http://h:1/x?q=1"])
def test_bad_endpoint(url):
    r = subprocess.run([ft_bin(), "serve", "-m", str(tiny_model()), "--port", "0", "--otlp-endpoint", url],
                       capture_output=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert b"--otlp-endpoint must be http://HOST[:PORT][/PATH]" in r.stderr
