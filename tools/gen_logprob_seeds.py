#!/usr/bin/env python3
"""Write the seed corpus of tests/fuzz/fuzz_logprob_file.c: small files in
llama.cpp's --kl-divergence-base format (see engine/include/ft/perplexity.h), built
here from the format's definition with numpy, plus a few broken ones.

Usage: python3 tools/gen_logprob_seeds.py [DIR]   (default tests/fuzz/corpus/logprob_file)
"""
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fuzz/corpus/logprob_file"
out.mkdir(parents=True, exist_ok=True)


def encode_row(logits):
    """One row as llama.cpp's log_softmax(..., uint16_t *log_prob, ...) stores it."""
    logits = logits.astype(np.float32)
    mx, mn = logits.max(), max(logits.min(), logits.max() - np.float32(16))
    lse = np.float32(np.log(np.exp((logits - mx).astype(np.float64)).sum()))
    scale = np.float32((mx - mn) / np.float32(65535))
    q = np.zeros(len(logits) + (len(logits) % 2), dtype=np.uint16)
    if scale > 0:
        v = np.rint((logits - mn) / scale)
        q[: len(logits)] = np.where(logits > mn, np.clip(v, 0, 65535), 0).astype(np.uint16)
    return struct.pack("<ff", scale, np.float32(mn - mx - lse)) + q.tobytes()


def make(n_ctx, n_vocab, n_chunk, seed):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, n_vocab, size=n_chunk * n_ctx, dtype=np.int32)
    body = b"_logits_" + struct.pack("<Iii", n_ctx, n_vocab, n_chunk) + tokens.tobytes()
    for _ in range(n_chunk * (n_ctx - 1 - n_ctx // 2)):
        body += encode_row(rng.normal(0, 3, size=n_vocab))
    return body


seeds = {
    "small": make(4, 3, 1, 1),
    "two_chunks": make(8, 16, 2, 2),
    "odd_ctx_vocab": make(9, 7, 1, 3),
    "flat_row": b"_logits_" + struct.pack("<Iii", 4, 2, 1) + bytes(16) + encode_row(np.zeros(2)),
}
good = seeds["two_chunks"]
seeds["truncated"] = good[:-5]
seeds["bad_magic"] = b"_logitz_" + good[8:]
seeds["bad_token"] = good[:20] + struct.pack("<i", 16) + good[24:]
nan_row = bytearray(good)
nan_row[20 + 16 * 4 : 20 + 16 * 4 + 4] = struct.pack("<f", float("nan"))
seeds["nan_scale"] = bytes(nan_row)
seeds["huge_counts"] = b"_logits_" + struct.pack("<Iii", 1 << 20, 1 << 24, 2**31 - 1)
for name, data in seeds.items():
    (out / name).write_bytes(data)
print(f"{len(seeds)} seeds in {out}")
