"""NUMA on real kernel topologies: qemu-system-x86_64 guests with 2 and 4
NUMA nodes, one with a node that has memory but no CPUs and one with
unequal nodes, booted from an initramfs holding busybox, the ft under test
(FT_BIN) with its libraries and one small model (tests/numa/guest_init.sh
is its /init). The guest's kernel is Debian's (tests/numa/run_numa_tests.sh
fetches it; FT_NUMA_KERNEL names it); KVM when FT_NUMA_ACCEL=kvm, TCG
otherwise.

Each --numa mode is checked against what it promises
(docs/architecture.md, Thread pool and NUMA; engine/runtime/placement.h),
from the kernel's own accounts of the running `ft serve`:
- threads: Cpus_allowed_list of every thread (/proc/PID/task/*/status):
  worker i on node i % n for distribute and replicate, every pinned thread
  on the chosen node for isolate;
- the plan (`ft info --hw` in the same mode): for replicate, each node's
  workers read the copy bound to their node;
- weight pages: the anonymous mappings hwloc placed (/proc/PID/numa_maps,
  pages per node): one copy on each node for replicate, one copy
  interleaved evenly for distribute, one copy on one node for isolate, and
  for off no placed mapping;
- the same `ft logits` output in every mode;
- `ft serve` answers a chat request with metrics (busybox wget in the
  guest).
The CPU-less node gets no weights and no threads (distribute and replicate
use the nodes with cores; isolate refuses it with one line); unequal nodes
get workers round-robin until the small node is full, and a copy for each
node."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FT_BIN = os.environ.get("FT_BIN", str(ROOT / "build" / "ft"))
SHARED = pathlib.Path(os.environ.get("FT_SHARED_DIR") or pathlib.Path(FT_BIN).parent / "test-data")
MODEL = SHARED / "models" / "llama-Q8_0.gguf"
KERNEL = os.environ.get("FT_NUMA_KERNEL", "")
ACCEL = os.environ.get("FT_NUMA_ACCEL", "tcg")
BUSYBOX = shutil.which("busybox") or "/bin/busybox"
PAGE = 4096
HUGE = 512  # base pages in a 2 MiB transparent huge page


@pytest.fixture(scope="module")
def initramfs(tmp_path_factory):
    for need, what in ((KERNEL, "FT_NUMA_KERNEL (tests/numa/run_numa_tests.sh fetches Debian's kernel)"),
                       (shutil.which("qemu-system-x86_64"), "qemu-system-x86_64 (apt-get install qemu-system-x86)"),
                       (shutil.which("cpio"), "cpio"), (FT_BIN, "FT_BIN")):
        if not need or not os.path.exists(need):
            pytest.skip(f"needs {what}")
    if b"statically linked" not in subprocess.run(["file", "-L", BUSYBOX], capture_output=True).stdout:
        pytest.skip("needs a static busybox (apt-get install busybox-static)")
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent: run the build's ctest (test data) first, or set FT_SHARED_DIR")
    d = tmp_path_factory.mktemp("initramfs")
    root = d / "root"
    for sub in ("bin", "proc", "sys", "dev", "tmp"):
        (root / sub).mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    shutil.copy(FT_BIN, root / "bin" / "ft")
    # ft's shared libraries and the loader, at the paths ldd resolved
    ldd = subprocess.run(["ldd", FT_BIN], capture_output=True, text=True, check=True).stdout
    for lib in re.findall(r"(/\S+) \(0x", ldd):
        dst = root / lib.lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.realpath(lib), dst)
    shutil.copy(ROOT / "tests" / "numa" / "guest_init.sh", root / "init")
    (root / "init").chmod(0o755)
    shutil.copy(MODEL, root / "model.gguf")
    img = d / "initramfs.cpio"
    files = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
    with open(img, "wb") as f:
        subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=files, stdout=f, check=True)
    return img


def boot(initramfs, qemu_numa, runs, tmp_path, chat=True, timeout=600):
    """Boot a guest with the given -smp/-numa arguments and return its report:
    nodes, info, and per run: logits rc/md5, threads, numa_maps lines, chat."""
    ref = json.loads((MODEL.with_suffix(".json")).read_text())
    tokens = ",".join(map(str, ref["prompt_tokens"][:16]))
    cmd = ["qemu-system-x86_64", "-accel", ACCEL, *qemu_numa, "-kernel", KERNEL, "-initrd", str(initramfs),
           "-append", f"console=ttyS0 quiet panic=-1 ft_runs={','.join(runs)} ft_tokens={tokens} "
                      f"ft_chat={int(chat)}",
           "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio", "-display", "none"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, timeout=timeout)
    wall = time.monotonic() - t0
    out = r.stdout.decode(errors="replace").replace("\r", "")
    # the firmware's terminal escapes may share a line with the first report
    out = re.sub(r"^[^\n]*?(?=@@)", "", out, flags=re.M)
    (tmp_path / "console.log").write_text(out)
    assert "@@done" in out, f"the guest did not finish (exit {r.returncode}):\n{out[-3000:]}\n{r.stderr.decode()}"
    rep = {"nodes": {}, "runs": {}, "wall": wall}
    rep["boot"] = float(re.search(r"^@@uptime (\S+)", out, re.M).group(1))
    rep["uptime"] = float(re.search(r"^@@done (\S+)", out, re.M).group(1))
    for m in re.finditer(r"^@@node (\d+) cpus=(\S*) mem_kb=(\d+)", out, re.M):
        rep["nodes"][int(m.group(1))] = {"cpus": cpus(m.group(2)), "mem_kb": int(m.group(3))}
    rep["info"] = section(out, "info")
    for block in out.split("@@run ")[1:]:
        spec = block.split("\n", 1)[0].strip()
        m = re.search(r"^@@logits rc=(\d+) md5=(\S+)", block, re.M)
        run = {"rc": int(m.group(1)), "md5": m.group(2), "stderr": section(block, "stderr")}
        run["threads"] = [(l.split()[0], cpus(l.split()[1])) for l in section(block, "threads").splitlines()
                          if len(l.split()) == 2]
        run["maps"] = [parse_numa_maps(l) for l in section(block, "numa_maps").splitlines() if l.strip()]
        run["chat"] = section(block, "chat")
        run["plan"] = section(block, "plan")
        rep["runs"][spec] = run
    print(f"guest {' '.join(qemu_numa)}: boot to init {rep['boot']:.1f} s (guest clock), "
          f"whole run {rep['uptime']:.1f} s guest / {wall:.1f} s host, accel {ACCEL}")
    return rep


def section(text, name):
    m = re.search(rf"^@@begin {name}\n(.*?)^@@end {name}$", text, re.M | re.S)
    return m.group(1) if m else ""


def cpus(s):
    """A cpulist ("0-2,5") as a set."""
    out = set()
    for part in filter(None, s.split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def parse_numa_maps(line):
    """(policy, {node: pages}) of one numa_maps line."""
    m = re.match(r"^[0-9a-f]+ (default|\S+(?: \(many\))?:\S+|\S+)", line)
    pages = {int(n): int(p) for n, p in re.findall(r"\bN(\d+)=(\d+)", line)}
    return m.group(1), pages


def weight_maps(run):
    """The mappings hwloc placed with a policy, big enough to hold weights:
    [(policy, nodes of the policy, {node: pages})]."""
    min_pages = MODEL.stat().st_size // PAGE // 2
    out = []
    for policy, pages in run["maps"]:
        if policy == "default" or sum(pages.values()) < min_pages:
            continue
        out.append((policy, cpus(policy.rsplit(":", 1)[1]), pages))
    return out


def copy_pages():
    """Pages of one copy of the weights: the file less its metadata."""
    return MODEL.stat().st_size // PAGE


def check_copy(pages, nodes, report=""):
    total = sum(pages.values())
    assert 0.8 * copy_pages() <= total <= 1.1 * copy_pages(), (total, copy_pages(), report)
    on = sum(p for n, p in pages.items() if n in nodes)
    assert on >= 0.99 * total, (pages, nodes, report)


def workers(run):
    """{i: cpus} of the pool's workers (ft-worker-i; worker 0 is the
    caller, the scheduler thread)."""
    return {int(n.rsplit("-", 1)[1]): c for n, c in run["threads"] if n.startswith("ft-worker-")}


def pinned(run, all_cpus):
    return [(n, c) for n, c in run["threads"] if c != all_cpus]


def node_of(rep, cpuset):
    nodes = [n for n, v in rep["nodes"].items() if cpuset and cpuset <= v["cpus"]]
    assert len(nodes) == 1, (cpuset, rep["nodes"])
    return nodes[0]


def check_chat(run):
    body = json.loads(run["chat"])
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant", body
    m = body["metrics"]
    assert body["usage"]["completion_tokens"] == 4 and m["decode_tokens"] == 3, body
    assert 0 <= m["queue_time_ms"] <= m["ttft_ms"] <= m["total_time_ms"], m


def report_pages(rep):
    for spec, run in rep["runs"].items():
        print(f"  --numa {spec}: weight mappings " +
              "; ".join(f"{p} {dict(sorted(pg.items()))}" for p, _, pg in weight_maps(run)) +
              f" | workers {sorted((i, sorted(c)) for i, c in workers(run).items())}")


def check_same_logits(rep):
    md5 = {spec: r["md5"] for spec, r in rep["runs"].items() if r["rc"] == 0}
    assert len(set(md5.values())) == 1, md5


def check_reads_own_copy(run, nodes):
    """The plan: each node's workers read the copy bound to that node (the
    pool reads it through ft_weight_data(w, ft_threadpool_current_node()),
    which tests/unit/test_numa_synthetic.c checks per task)."""
    for i, n in enumerate(nodes):
        assert f"weights {i}: bound to node {n}, read by node {n}" in run["plan"], run["plan"]


def check_round_robin(rep, run, node_order):
    """Worker i runs on node_order[i] (the caller, worker 0, is not named)."""
    for i, c in workers(run).items():
        assert node_of(rep, c) == node_order[i], (i, c, node_order)


def test_two_nodes(initramfs, tmp_path):
    qn = ["-m", "1024", "-smp", "2,sockets=2",
          "-object", "memory-backend-ram,id=m0,size=512M", "-object", "memory-backend-ram,id=m1,size=512M",
          "-numa", "node,nodeid=0,cpus=0,memdev=m0", "-numa", "node,nodeid=1,cpus=1,memdev=m1"]
    rep = boot(initramfs, qn, ["off", "distribute", "isolate:1", "replicate"], tmp_path)
    report_pages(rep)
    assert sorted(rep["nodes"]) == [0, 1]
    assert "2 NUMA nodes" in rep["info"], rep["info"]
    runs = rep["runs"]
    for spec, run in runs.items():
        assert run["rc"] == 0, (spec, run["stderr"])
        check_chat(run)
    check_same_logits(rep)
    everything = {0, 1}
    # off: one thread per core in topology order, weights not placed
    assert weight_maps(runs["off"]) == []
    check_round_robin(rep, runs["off"], [0, 1])
    # distribute: workers round-robin, one copy interleaved over both nodes
    (pol, nodes, pages), = weight_maps(runs["distribute"])
    assert pol.startswith("interleave") and nodes == everything, pol
    check_copy(pages, everything)
    assert abs(pages.get(0, 0) - pages.get(1, 0)) <= HUGE + 0.02 * sum(pages.values()), pages
    check_round_robin(rep, runs["distribute"], [0, 1])
    # isolate on node 1: one copy there, every pinned thread there
    (pol, nodes, pages), = weight_maps(runs["isolate:1"])
    assert nodes == {1}, pol
    check_copy(pages, {1})
    assert pinned(runs["isolate:1"], everything) and \
        all(c <= rep["nodes"][1]["cpus"] for _, c in pinned(runs["isolate:1"], everything))
    # replicate: a copy on each node, workers round-robin
    maps = weight_maps(runs["replicate"])
    assert sorted(tuple(sorted(n)) for _, n, _ in maps) == [(0,), (1,)], maps
    for _, nodes, pages in maps:
        check_copy(pages, nodes)
    check_round_robin(rep, runs["replicate"], [0, 1])
    check_reads_own_copy(runs["replicate"], [0, 1])


def test_four_nodes(initramfs, tmp_path):
    qn = ["-m", "1024", "-smp", "4,sockets=4"]
    for i in range(4):
        qn += ["-object", f"memory-backend-ram,id=m{i},size=256M", "-numa", f"node,nodeid={i},cpus={i},memdev=m{i}"]
    rep = boot(initramfs, qn, ["distribute", "isolate:2", "replicate"], tmp_path)
    report_pages(rep)
    assert sorted(rep["nodes"]) == [0, 1, 2, 3]
    runs = rep["runs"]
    for spec, run in runs.items():
        assert run["rc"] == 0, (spec, run["stderr"])
        check_chat(run)
    check_same_logits(rep)
    everything = {0, 1, 2, 3}
    (pol, nodes, pages), = weight_maps(runs["distribute"])
    assert pol.startswith("interleave") and nodes == everything, pol
    check_copy(pages, everything)
    # Interleaving goes page by page, but a transparent huge page (the
    # weights are advised MADV_HUGEPAGE) is one 2 MiB page on one node:
    # each node's share is even to within the huge pages it got.
    share = sum(pages.values()) / 4
    assert all(abs(pages.get(n, 0) - share) <= HUGE + 0.03 * share for n in everything), pages
    check_round_robin(rep, runs["distribute"], [0, 1, 2, 3])
    (pol, nodes, pages), = weight_maps(runs["isolate:2"])
    assert nodes == {2}, pol
    check_copy(pages, {2})
    assert all(c <= rep["nodes"][2]["cpus"] for _, c in pinned(runs["isolate:2"], everything))
    maps = weight_maps(runs["replicate"])
    assert sorted(tuple(sorted(n)) for _, n, _ in maps) == [(0,), (1,), (2,), (3,)], maps
    for _, nodes, pages in maps:
        check_copy(pages, nodes)
    check_round_robin(rep, runs["replicate"], [0, 1, 2, 3])
    check_reads_own_copy(runs["replicate"], [0, 1, 2, 3])


def test_cpuless_memory_node(initramfs, tmp_path):
    """Node 1 has memory and no CPUs (as CXL or HBM memory shows up): the
    modes use the nodes with cores only, and isolate refuses node 1."""
    qn = ["-m", "1024", "-smp", "2,sockets=1,cores=2",
          "-object", "memory-backend-ram,id=m0,size=768M", "-object", "memory-backend-ram,id=m1,size=256M",
          "-numa", "node,nodeid=0,cpus=0-1,memdev=m0", "-numa", "node,nodeid=1,memdev=m1"]
    rep = boot(initramfs, qn, ["distribute", "replicate", "isolate:1", "isolate:0"], tmp_path)
    report_pages(rep)
    assert rep["nodes"][1]["cpus"] == set() and rep["nodes"][1]["mem_kb"] > 0, rep["nodes"]
    runs = rep["runs"]
    assert runs["isolate:1"]["rc"] != 0
    assert "has no cores" in runs["isolate:1"]["stderr"], runs["isolate:1"]["stderr"]
    for spec in ("distribute", "replicate", "isolate:0"):
        assert runs[spec]["rc"] == 0, (spec, runs[spec]["stderr"])
        check_chat(runs[spec])
        maps = weight_maps(runs[spec])
        assert len(maps) == 1, (spec, maps)       # one copy, not one per node
        pol, nodes, pages = maps[0]
        assert nodes == {0}, (spec, pol)           # the CPU-less node gets none
        check_copy(pages, {0}, spec)
        assert all(c <= {0, 1} for _, c in runs[spec]["threads"])
    check_same_logits(rep)


def test_unequal_nodes(initramfs, tmp_path):
    """Node 0 has 3 CPUs and 768 MiB, node 1 one CPU and 256 MiB: distribute
    and replicate go round-robin until node 1 is full (workers on nodes
    0, 1, 0, 0), replicate still keeps one copy per node."""
    qn = ["-m", "1024", "-smp", "4,sockets=4",
          "-object", "memory-backend-ram,id=m0,size=768M", "-object", "memory-backend-ram,id=m1,size=256M",
          "-numa", "node,nodeid=0,cpus=0-2,memdev=m0", "-numa", "node,nodeid=1,cpus=3,memdev=m1"]
    rep = boot(initramfs, qn, ["distribute", "replicate", "isolate:1"], tmp_path)
    report_pages(rep)
    runs = rep["runs"]
    for spec, run in runs.items():
        assert run["rc"] == 0, (spec, run["stderr"])
        check_chat(run)
    check_same_logits(rep)
    check_round_robin(rep, runs["distribute"], [0, 1, 0, 0])
    check_round_robin(rep, runs["replicate"], [0, 1, 0, 0])
    (pol, nodes, pages), = weight_maps(runs["distribute"])
    assert nodes == {0, 1}
    check_copy(pages, {0, 1})
    maps = weight_maps(runs["replicate"])
    assert sorted(tuple(sorted(n)) for _, n, _ in maps) == [(0,), (1,)], maps
    for _, nodes, pages in maps:
        check_copy(pages, nodes)
    # isolate on the small node: one thread (its one core), one copy there
    assert not workers(runs["isolate:1"])
    (pol, nodes, pages), = weight_maps(runs["isolate:1"])
    check_copy(pages, {1})
