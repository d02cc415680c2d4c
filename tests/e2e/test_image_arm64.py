"""The linux/arm64 OCI image (deploy/build-image.sh --arch arm64), built and
run without executing any arm64 code in podman: this host has no
binfmt_misc, so the image is assembled on the host (ft cross-compiled for
aarch64, a root filesystem of Debian 12's arm64 packages unpacked with
dpkg -x) and imported with `podman import --arch arm64`. It is checked from
outside: podman's image configuration (architecture, user, entrypoint, as
the x86 image's), then the filesystem of a container made from it (podman
create + export, nothing started) is run with qemu-aarch64 -L ROOTFS on the
host: the loader's library list, `ft info --hw`, /bin/sleep (the
Deployment's preStop hook) and the image's own entrypoint and command
(`ft serve`, port 0 instead of 8080) with the default model (Gemma 3 270M)
at /models/model.gguf inside that filesystem, answering one chat request
with "Paris"; the libraries the serving process maps all come from the
image's filesystem (/proc/PID/maps of qemu).

Opt-in like tests/e2e/test_image.py: FT_TEST_IMAGE=1 (scripts/test.sh sets
it). Reuses the arm64 sysroot and the cross-build directory of
tests/arm/run_arm_ft.sh (build/arm64-sysroot, build/arm64; FT_ARM64_SYSROOT
and FT_ARM64_BUILD_DIR as there) and makes them when absent (measured: 4 s
for the sysroot from cached .debs, 27 s for the cross build); with both in
place the whole file took 21 s (10 s to build the image).
Skipped, saying so, only when the cross toolchain or qemu-aarch64 is not
installed (scripts/setup.sh installs them)."""
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import urllib.request

import pytest

from conftest import ROOT
from test_image import BUILD, podman

MAX_IMAGE_BYTES = 150_000_000  # 68 MB when measured
QEMU = "qemu-aarch64"

pytestmark = pytest.mark.skipif(os.environ.get("FT_TEST_IMAGE") != "1",
                                reason="builds the OCI image: set FT_TEST_IMAGE=1 (scripts/test.sh does)")


@pytest.fixture(scope="module")
def image():
    assert shutil.which("podman"), "FT_TEST_IMAGE=1 needs podman (scripts/setup.sh installs it)"
    missing = [t for t in ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-readelf", QEMU) if not shutil.which(t)]
    if missing:
        pytest.skip(f"the linux/arm64 image needs {', '.join(missing)}: "
                    "apt-get install gcc-aarch64-linux-gnu qemu-user (scripts/setup.sh does)")
    tag = f"localhost/freetoken/ft:e2e-arm64-{os.getpid()}"
    t0 = time.monotonic()
    r = subprocess.run([str(BUILD), "--arch", "arm64", "--tag", tag], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    print(f"linux/arm64 image built in {time.monotonic() - t0:.1f} s:", r.stdout.strip().splitlines()[-1])
    yield tag
    podman("rmi", "-f", tag, check=False)


@pytest.fixture(scope="module")
def rootfs(image, tmp_path_factory):
    """The image's filesystem, as a container made from it has it (nothing runs)."""
    d = tmp_path_factory.mktemp("arm64-rootfs")
    cid = podman("create", "--arch", "arm64", image).stdout.strip()
    try:
        tar = d.parent / "arm64-rootfs.tar"
        podman("export", "-o", str(tar), cid)
    finally:
        podman("rm", "-f", cid, check=False)
    with tarfile.open(tar) as t:
        t.extractall(d, numeric_owner=True)
    tar.unlink()
    return d


def qemu(rootfs, *args, timeout=120, **kw):
    return subprocess.run([QEMU, "-L", str(rootfs), "-cpu", "max", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, **kw)


def machine(path):
    r = subprocess.run(["aarch64-linux-gnu-readelf", "-h", str(path)], capture_output=True, text=True)
    m = re.search(r"Machine:\s+(\S+)", r.stdout)
    return m and m.group(1)


def test_manifest_is_arm64_with_the_x86_images_config(image):
    cfg = json.loads(podman("image", "inspect", image).stdout)[0]
    assert cfg["Architecture"] == "arm64" and cfg["Os"] == "linux", (cfg["Architecture"], cfg["Os"])
    c = cfg["Config"]
    assert c["User"] == "10001:10001"
    assert "/models" in c["Volumes"]
    assert "8080/tcp" in c["ExposedPorts"]
    assert c["Entrypoint"] == ["/usr/local/bin/ft", "serve"]
    assert c["Cmd"] == ["--host", "0.0.0.0", "--port", "8080", "--metrics-compat", "vllm"]
    assert "FT_MODEL=/models/model.gguf" in c["Env"]
    assert 0 < cfg["Size"] < MAX_IMAGE_BYTES, cfg["Size"]


def test_filesystem(rootfs):
    ft = rootfs / "usr/local/bin/ft"
    assert machine(ft) == "AArch64"
    assert ft.stat().st_uid == 0 and ft.stat().st_mode & 0o777 == 0o755
    passwd = (rootfs / "etc/passwd").read_text().splitlines()
    assert "ft:x:10001:10001::/nonexistent:/usr/sbin/nologin" in passwd
    assert "ft:x:10001:" in (rootfs / "etc/group").read_text().splitlines()
    assert (rootfs / "tmp").stat().st_mode & 0o7777 == 0o1777
    # merged /usr, as in Debian 12; no build tools
    for d in ("bin", "sbin", "lib"):
        assert os.readlink(rootfs / d) == f"usr/{d}"
    for tool in ("cc", "gcc", "cmake", "ninja", "apt-get", "dpkg"):
        assert not (rootfs / "usr/bin" / tool).exists(), tool
    # the preStop hook's /bin/sleep, and /bin/sh
    assert machine(os.path.realpath(rootfs / "usr/bin/sleep")) == "AArch64"
    assert qemu(rootfs, rootfs / "bin/sleep", "0").returncode == 0
    r = qemu(rootfs, rootfs / "bin/sh", "-c", "echo ok")
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_loader_finds_every_library_in_the_image(rootfs):
    r = qemu(rootfs, rootfs / "lib/ld-linux-aarch64.so.1", "--list", rootfs / "usr/local/bin/ft")
    assert r.returncode == 0, r.stderr
    assert "not found" not in r.stdout, r.stdout
    libs = re.findall(r"=> (/\S+)", r.stdout)
    assert len(libs) >= 8, r.stdout
    for lib in libs:  # guest paths, but the loader's own is the one given to it
        path = lib if lib.startswith(str(rootfs) + "/") else rootfs / lib.lstrip("/")
        assert os.path.exists(path), lib


def test_info_hw(rootfs):
    r = qemu(rootfs, rootfs / "usr/local/bin/ft", "info", "--hw")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^cpu:\s+aarch64$", r.stdout, re.M), r.stdout
    assert re.search(r"^isa:\s+neon", r.stdout, re.M), r.stdout


def test_serve_entrypoint_answers_chat(image, rootfs, real_model):
    cfg = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    # The model where the image expects its volume: qemu's -L looks up
    # /models/model.gguf in the root filesystem first.
    try:
        os.link(real_model, rootfs / "models/model.gguf")
    except OSError:
        shutil.copyfile(real_model, rootfs / "models/model.gguf")
    argv = [str(rootfs) + cfg["Entrypoint"][0], *cfg["Entrypoint"][1:],
            *["0" if a == "8080" else a for a in cfg["Cmd"]]]
    env = dict(kv.split("=", 1) for kv in cfg["Env"])
    err = rootfs.parent / "arm64-serve.stderr"
    p = subprocess.Popen([QEMU, "-L", str(rootfs), "-cpu", "max", *argv], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(err, "wb"))
    try:
        t0 = time.monotonic()
        port = None
        while time.monotonic() - t0 < 120:
            assert p.poll() is None, err.read_text()
            text = err.read_text()
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m:
                port = int(m.group(1))
            if "ready:" in text:
                break
            time.sleep(0.1)
        assert port and "ready:" in err.read_text(), err.read_text()
        assert "(loading /models/model.gguf)" in err.read_text()
        # Every shared object the serving process maps is the image's.
        mapped = {f[5] for f in (line.split(None, 5) for line in open(f"/proc/{p.pid}/maps"))
                  if len(f) == 6 and ".so" in f[5]}
        guest = {m.strip() for m in mapped if m.startswith(str(rootfs) + "/")}
        assert any("libdnnl" in m for m in guest) and any("/libc.so.6" in m for m in guest), mapped
        assert not [m for m in mapped if "aarch64" in m and not m.startswith(str(rootfs) + "/")], mapped
        body = json.dumps({"messages": [{"role": "user", "content": "What is the capital of France?"}],
                           "max_tokens": 12, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            out = json.loads(r.read())
        assert "Paris" in out["choices"][0]["message"]["content"], out
        assert out["usage"]["completion_tokens"] > 0
        print(f"ft serve from the arm64 image under qemu-aarch64: ready and answered in "
              f"{time.monotonic() - t0:.1f} s")
    finally:
        p.terminate()
        rc = p.wait(timeout=60)
    assert rc == 0, err.read_text()
    assert "SIGTERM" in err.read_text()
