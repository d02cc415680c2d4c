"""deploy/ checked offline: the Kubernetes manifests against the pinned
Kubernetes version's schemas (kubernetes-validate, which ships them), the
InferencePool and the endpoint picker's config against structural schemas of
their APIs (deploy/schemas/), the cross-references between them, the
Containerfile as far as it can be checked without building it
(test_image.py builds and runs it, opt-in), and every metric name the Grafana dashboard, the
HPA, the prometheus-adapter rule and the endpoint picker use against a live
/metrics scrape of ft serve run with the Deployment's own arguments.

Every validator is first shown to reject a broken copy, so none of these
checks can pass by accepting everything."""
import copy
import json
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, ft_bin
from test_serve import Server, tiny_model

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")
prom_parser = pytest.importorskip("prometheus_client.parser")

DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.34.0"  # the Kubernetes version the manifests are validated for
BUILTIN_GROUPS = ("v1", "apps/", "autoscaling/", "rbac.authorization.k8s.io/")


def docs(name):
    with open(DEPLOY / "k8s" / name) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def all_docs():
    return [d for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in docs(p.name)]


def one(kind, name=None):
    got = [d for d in all_docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(got) == 1, (kind, name, len(got))
    return got[0]


def schema(name):
    with open(DEPLOY / "schemas" / name) as f:
        return json.load(f)


def rejects(validate, doc):
    try:
        validate(doc)
    except Exception:  # noqa: BLE001 - any validation error counts
        return True
    return False


# ---- Kubernetes built-in kinds ----------------------------------------------------------------

def test_builtin_manifests_validate_offline():
    kv = pytest.importorskip("kubernetes_validate")

    def validate(d):
        kv.validate(d, K8S_VERSION, strict=True)

    builtin = [d for d in all_docs() if d["apiVersion"].startswith(BUILTIN_GROUPS)]
    kinds = {d["kind"] for d in builtin}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap", "ServiceAccount", "Role",
            "RoleBinding"} <= kinds, kinds
    for d in builtin:
        validate(d)
    # The validator is not a no-op: a wrong type and an unknown field are refused.
    bad = copy.deepcopy(one("Deployment", "ft-serve"))
    bad["spec"]["replicas"] = "two"
    assert rejects(validate, bad)
    bad = copy.deepcopy(one("HorizontalPodAutoscaler"))
    bad["spec"]["metrics"][0]["pods"]["metrik"] = bad["spec"]["metrics"][0]["pods"].pop("metric")
    assert rejects(validate, bad)


def test_deployment_probes_security_and_service():
    dep = one("Deployment", "ft-serve")
    pod = dep["spec"]["template"]
    c = pod["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    mount = [m for m in c["volumeMounts"] if m["mountPath"] == "/models"]
    assert mount and mount[0]["readOnly"] is True
    args = c["args"]
    assert args[args.index("-m") + 1].startswith("/models/")
    assert args[args.index("--metrics-compat") + 1] == "vllm"
    # Grace period longer than the server's own drain time.
    assert pod["spec"]["terminationGracePeriodSeconds"] > int(args[args.index("--shutdown-timeout") + 1])
    svc = one("Service", "ft-serve")
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["targetPort"] in [p["name"] for p in c["ports"]]
    hpa = one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ft-serve"}


def test_deployment_args_start_ft_serve(tmp_path):
    # The container's arguments, as the pod would run them, on loopback and
    # the tiny model: they parse, and the probes' paths answer.
    c = one("Deployment", "ft-serve")["spec"]["template"]["spec"]["containers"][0]
    args, skip = [], {"--host", "--port", "-m", "-t"}
    it = iter(c["args"])
    for a in it:
        if a in skip:
            next(it)
            continue
        args.append(a)
    s = Server(tiny_model(), *args, "-t", "1", "-c", "256")
    try:
        assert s.request("GET", c["readinessProbe"]["httpGet"]["path"])[0] == 200
        assert s.request("GET", c["livenessProbe"]["httpGet"]["path"])[0] == 200
        json.loads(s.log_lines()[-1])  # --log-format json: one JSON object per line
    finally:
        assert s.stop() == 0, s.stderr()


# ---- InferencePool and the endpoint picker --------------------------------------------------------

def test_inferencepool_matches_its_api_and_the_deployment():
    pool = one("InferencePool")
    sch = schema("inferencepool-v1.schema.json")

    def validate(d):
        jsonschema.validate(d, sch)

    validate(pool)
    for broken in ("no picker", "old field", "port range"):
        bad = copy.deepcopy(pool)
        if broken == "no picker":
            del bad["spec"]["endpointPickerRef"]
        elif broken == "old field":  # v1alpha2's name for it
            bad["spec"]["extensionRef"] = bad["spec"].pop("endpointPickerRef")
        else:
            bad["spec"]["targetPorts"][0]["number"] = 70000
        assert rejects(validate, bad), broken
    # The pool selects the ft-serve pods on their port; the picker is the EPP Service.
    dep = one("Deployment", "ft-serve")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = [p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]]
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == ports[:1]
    ref = pool["spec"]["endpointPickerRef"]
    epp_svc = one("Service", ref["name"])
    assert ref["port"]["number"] in [p["port"] for p in epp_svc["spec"]["ports"]]
    epp = one("Deployment", ref["name"])
    args = epp["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == pool["metadata"]["name"]


def epp_config():
    cm = one("ConfigMap", "ft-serve-epp")
    return yaml.safe_load(cm["data"]["config.yaml"])


def test_endpoint_picker_config():
    cfg = epp_config()
    sch = schema("endpointpickerconfig-v1alpha1.schema.json")

    def validate(d):
        jsonschema.validate(d, sch)
        declared = {p.get("name", p["type"]) for p in d["plugins"]}
        for prof in d["schedulingProfiles"]:
            for ref in prof["plugins"]:
                if ref["pluginRef"] not in declared:
                    raise ValueError(f"pluginRef {ref['pluginRef']} is not declared")

    validate(cfg)
    bad = copy.deepcopy(cfg)
    bad["schedulingProfiles"][0]["plugins"].append({"pluginRef": "no-such-scorer", "weight": 1})
    assert rejects(validate, bad)
    bad = copy.deepcopy(cfg)
    bad["kind"] = "EndpointPicker"
    assert rejects(validate, bad)
    # The config file the EPP is pointed at is the ConfigMap's key.
    epp = one("Deployment", "ft-serve-epp")
    c = epp["spec"]["template"]["spec"]["containers"][0]
    path = c["args"][c["args"].index("--config-file") + 1]
    mount = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "config"][0]
    assert path == mount + "/config.yaml"


# ---- Containerfile (read here; built and run by test_image.py) ----------------------------------------

def containerfile():
    """The stages, after the global ARGs (the ops before the first FROM) as stage 0's "global"."""
    text = (DEPLOY / "Containerfile").read_text()
    text = re.sub(r"\\\n", " ", text)  # join continuation lines
    glob, stages, cur = [], [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        if op.upper() == "FROM":
            cur = {"from": rest, "ops": [], "global": glob}
            stages.append(cur)
        elif cur is None:
            glob.append((op.upper(), rest))
        else:
            cur["ops"].append((op.upper(), rest))
    return stages


def apt_packages(stage):
    pk = []
    for op, rest in stage["ops"]:
        if op == "RUN" and "apt-get install" in rest:
            seg = rest.split("apt-get install", 1)[1].split("&&")[0]
            pk += [w for w in seg.split() if not w.startswith("-")]
    return pk


def setup_packages():
    text = (ROOT / "scripts" / "setup.sh").read_text()
    m = re.search(r"^PKGS=\((.*?)\)", text, re.S | re.M)
    return m.group(1).split()


def test_containerfile_stages_user_volume():
    st = containerfile()
    # Both stages from BASE, debian:12 unless a local base is passed
    # (deploy/build-image.sh without a registry).
    assert ("ARG", "BASE=debian:12") in st[0]["global"]
    assert [s["from"] for s in st] == ["${BASE} AS build", "${BASE}"]
    run = st[-1]["ops"]
    user = [r for op, r in run if op == "USER"]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    # USER's uid and gid are the ft user and group the run stage creates,
    # so the process has a named group, as the Deployment's runAsGroup.
    uid, gid = user[-1].split(":")
    made = " ".join(r for op, r in run if op == "RUN")
    assert re.search(rf"groupadd\b[^&]*--gid {gid} ft\b", made), made
    assert re.search(rf"useradd\b[^&]*--uid {uid} --gid {gid}\b[^&]* ft\b", made), made
    dep = one("Deployment", "ft-serve")["spec"]["template"]["spec"]["securityContext"]
    assert (str(dep["runAsUser"]), str(dep["runAsGroup"])) == (uid, gid)
    assert any(op == "VOLUME" and "/models" in r for op, r in run)
    entry = [json.loads(r) for op, r in run if op == "ENTRYPOINT"][0]
    cmd = [json.loads(r) for op, r in run if op == "CMD"][0]
    assert entry == ["/usr/local/bin/ft", "serve"]
    # Every flag of the default command exists in this build's `ft serve --help`.
    helptext = subprocess.run([ft_bin(), "serve", "--help"], capture_output=True, timeout=60).stdout.decode()
    for flag in [a for a in cmd if a.startswith("-")]:
        assert re.search(r"(^|[\s,])" + re.escape(flag) + r"\b", helptext, re.M), flag
    # The build stage has setup.sh's build packages; the copied sources are
    # the directories CMakeLists.txt builds from.
    build = set(apt_packages(st[0]))
    need = {"build-essential", "cmake", "ninja-build", "pkg-config", "libhwloc-dev", "libevent-dev",
            "libcjson-dev", "libdnnl-dev"}
    assert need <= set(setup_packages()), "setup.sh changed: update the Containerfile"
    assert need <= build, need - build
    copied = {r.split()[0].rstrip("/") for op, r in st[0]["ops"] if op == "COPY"}
    cmake = (ROOT / "CMakeLists.txt").read_text()
    used = set(re.findall(r"\b(cmake|include|simd|engine|http|cli|bench)/", cmake)) | {"CMakeLists.txt"}
    assert used <= copied, used - copied
    for d in copied:
        assert (ROOT / d).exists(), d


def test_runtime_packages_provide_the_binarys_libraries():
    # The run stage's packages, on this Debian 12 machine, own every shared
    # library the `ft` binary needs (besides libc/libm from the base image).
    if not shutil.which("dpkg") or not shutil.which("readelf"):
        pytest.skip("dpkg/readelf absent: not a Debian machine")
    runtime = set(apt_packages(containerfile()[-1]))
    out = subprocess.run(["readelf", "-d", ft_bin()], capture_output=True, text=True, timeout=60).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    assert "libevent-2.1.so.7" in needed
    for lib in needed:
        r = subprocess.run(["dpkg", "-S", f"*/{lib}"], capture_output=True, text=True, timeout=60)
        owners = {line.split(":")[0] for line in r.stdout.splitlines()}
        assert r.returncode == 0 and owners, (lib, r.stderr)
        assert owners & (runtime | {"libc6"}), f"{lib} comes from {owners}, not in the run stage {runtime}"


# ---- metric names in the dashboard, HPA, adapter and EPP against a live scrape -----------------------

NAME = re.compile(r"(?<![\w:])((?:ft_|vllm:|gen_ai_)[A-Za-z0-9_:]*)")


def used_metric_names():
    """{name: where} for every metric name the deploy files use."""
    used = {}
    dash = json.loads((DEPLOY / "grafana" / "ft-serve-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs.append(dash["templating"]["list"][1]["definition"])
    for e in exprs:
        # Label names (in "by (...)" and selectors) are not metric names.
        for n in NAME.findall(re.sub(r"\bby\s*\([^)]*\)|\{[^}]*\}", " ", e)):
            used[n] = "dashboard"
    hpa = one("HorizontalPodAutoscaler")
    for m in hpa["spec"]["metrics"]:
        used[m["pods"]["metric"]["name"]] = "hpa"
    rules = yaml.safe_load(one("ConfigMap", "prometheus-adapter-ft")["data"]["config.yaml"])["rules"]
    for r in rules:
        for n in NAME.findall(r["seriesQuery"]) + [r["name"]["as"]]:
            used[n] = "prometheus-adapter"
    args = one("Deployment", "ft-serve-epp")["spec"]["template"]["spec"]["containers"][0]["args"]
    for i, a in enumerate(args):
        if a.endswith("-metric") and args[i + 1]:
            used[args[i + 1]] = "epp " + a
    return used


def test_metric_names_are_real():
    used = used_metric_names()
    assert {"ft_requests_waiting", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "ft_time_to_first_token_seconds_bucket", "gen_ai_server_request_duration_seconds_bucket"} <= set(used)
    s = Server(tiny_model(), "-c", "256", "-t", "1", "--metrics-compat", "vllm")
    try:
        cl = s.client()
        mid = cl.models.list().data[0].id
        cl.chat.completions.create(model=mid, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        cl.completions.create(model=mid, prompt="hi", max_tokens=3)
        status, _, body = s.request("GET", "/metrics")
        assert status == 200
    finally:
        assert s.stop() == 0, s.stderr()
    live = set()
    for fam in prom_parser.text_string_to_metric_families(body.decode()):
        live.add(fam.name)
        live.update(x.name for x in fam.samples)
    missing = {n: where for n, where in used.items() if n not in live}
    assert not missing, f"not in a live scrape of ft serve: {missing}"
    # Labels the dashboard groups or filters by: ft serve's own, or added by the scrape.
    labels = {k for fam in prom_parser.text_string_to_metric_families(body.decode())
              for x in fam.samples for k in x.labels}
    dash = json.loads((DEPLOY / "grafana" / "ft-serve-dashboard.json").read_text())
    for e in [t["expr"] for p in dash["panels"] for t in p["targets"]]:
        for group in re.findall(r"\bby\s*\(([^)]*)\)", e) + re.findall(r"\{([^}]*)\}", e):
            for lab in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!=|=|,|$)", group.strip()):
                assert lab in labels | {"job", "pod", "namespace", "instance"}, (lab, e)
    # The check itself catches a wrong name.
    assert "ft_requests_queued" not in live and "vllm:num_requests_swapped" not in live


def test_prometheus_scrape_config_keeps_the_pods():
    cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert len(jobs) == len(cfg["scrape_configs"])
    pods = jobs["ft-serve-pods"]
    dep = one("Deployment", "ft-serve")
    meta = dep["spec"]["template"]["metadata"]
    port_names = [p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]]
    # Every keep rule matches the Deployment's pods.
    values = {
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": meta["labels"]["app.kubernetes.io/name"],
        "__meta_kubernetes_pod_annotation_prometheus_io_scrape": meta["annotations"]["prometheus.io/scrape"],
        "__meta_kubernetes_pod_container_port_name": port_names[0],
    }
    keeps = [r for r in pods["relabel_configs"] if r.get("action") == "keep"]
    assert len(keeps) == 3
    for r in keeps:
        assert re.fullmatch(r["regex"], values[r["source_labels"][0]]), r
    assert meta["annotations"]["prometheus.io/path"] == pods["metrics_path"] == "/metrics"
    targets = {r["target_label"] for r in pods["relabel_configs"] if "target_label" in r}
    assert {"namespace", "pod"} <= targets  # what the adapter rule maps to resources
