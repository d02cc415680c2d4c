#!/usr/bin/env python3
"""Generate tests/unit/data/quant_vectors.h: reference vectors for the GGUF
quantization formats, computed by gguf-py (the Python package `gguf`, the
GGUF project's own numpy implementation) and numpy, independently of
FreeToken's C code.

The header holds:
  * a few fixed float input rows (stored as bit patterns, so C reads the
    exact floats), and for each row the bytes gguf-py's quantizer writes for
    every type it can quantize (F16 via numpy float16, BF16, Q8_0, Q4_0,
    Q4_1, Q5_0, Q5_1);
  * for every type test_quant.c covers, a few blocks of random (but valid)
    bytes and the floats gguf-py's dequantizer makes of them. gguf-py has no
    Q8_1/Q8_K classes (they are activation-only); those two are decoded with
    the numpy one-liner below (x = d * q).

Regenerate with:  python3 tools/gen_quant_vectors.py > tests/unit/data/quant_vectors.h
(deterministic: fixed seeds; needs numpy and gguf).
"""

import importlib.metadata

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

N = 256  # elements per row: one 256-block, eight 32-blocks

QUANT_TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
DEQUANT_TYPES = ["F16", "BF16", "Q8_0", "Q8_1", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                 "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]

# (block elements, block bytes, offsets of half-precision scale fields)
LAYOUT = {
    "Q8_0": (32, 34, [0]), "Q8_1": (32, 36, [0, 2]),
    "Q4_0": (32, 18, [0]), "Q4_1": (32, 20, [0, 2]),
    "Q5_0": (32, 22, [0]), "Q5_1": (32, 24, [0, 2]),
    "Q2_K": (256, 84, [80, 82]), "Q3_K": (256, 110, [108]),
    "Q4_K": (256, 144, [0, 2]), "Q5_K": (256, 176, [0, 2]),
    "Q6_K": (256, 210, [208]), "Q8_K": (256, 292, []),
    "F16": (1, 2, []), "BF16": (1, 2, []),
}


def inputs():
    """Fixed input rows exercising the quantizers' corner cases."""
    rng = np.random.default_rng(20240611)
    rows = []
    # 0: plain gaussian weights
    rows.append(rng.standard_normal(N).astype(np.float32) * np.float32(0.02))
    # 1: mixed scales per 32-block: zeros, tiny, huge, outliers, constants
    r = rng.standard_normal(N).astype(np.float32)
    scale = np.float32(10.0) ** rng.integers(-6, 4, size=N // 32).astype(np.float32)
    r *= np.repeat(scale, 32)
    r[0:32] = 0.0                        # an all-zero block
    r[32:64] = np.float32(0.75)          # a constant block
    r[64:96] = -np.float32(0.75)         # a negative constant block
    r[96:128] *= np.float32(1e-20)       # below GROUP_MAX_EPS-ish scales
    r[130] = np.float32(40.0)            # an outlier
    r[200] = -np.float32(55.0)
    r[128 + 7] = 0.0
    rows.append(r)
    # 2: all positive (mins are 0), and a block whose max equals -min
    r = np.abs(rng.standard_normal(N).astype(np.float32))
    r[32:64] = np.linspace(-1, 1, 32, dtype=np.float32)
    r[128:160] = rng.integers(-8, 8, size=32).astype(np.float32)  # exact grid
    rows.append(r)
    # 3: uniform with ties: values on k + 0.5 steps of a power-of-two scale
    r = (rng.integers(-64, 64, size=N).astype(np.float32) + np.float32(0.5)) * np.float32(0.125)
    rows.append(r)
    return [np.ascontiguousarray(x, dtype=np.float32) for x in rows]


def f16_edges():
    """A row for the F16/BF16 converters: rounding ties, subnormals, overflow."""
    v = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.996, 65520.0, -65520.0, 1e10,
         np.inf, -np.inf, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
         2.0 ** -25 * 1.0000001, 1.5 * 2.0 ** -24, 2.5 * 2.0 ** -24,
         1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -11 + 2.0 ** -20,
         1e-45, -1e-45, 1e-38, 6.1e-5, 3.14159265, -2.71828, 1e-8]
    v = np.array(v, dtype=np.float32)
    # BF16 ties: mantissa low half exactly 0x8000 with even and odd upper bit
    ties = np.array([0x3f808000, 0x3f818000, 0xbf808000, 0x7f7f8000, 0x7f7fffff, 0x00008000,
                     0x7fc00000, 0xffc00000], dtype=np.uint32).view(np.float32)
    rng = np.random.default_rng(7)
    # random bit patterns away from NaN (numpy's float16 keeps NaN payloads,
    # ggml canonicalises them; tested separately in C)
    bits = rng.integers(0, 2 ** 32, size=N, dtype=np.uint64).astype(np.uint32)
    rnd = bits.view(np.float32)
    rnd = np.where(np.isnan(rnd), np.float32(1.0), rnd)
    row = np.concatenate([v, ties, rnd])[:N].astype(np.float32)
    return row


def quantize_bytes(name, row):
    if name == "F16":
        # numpy keeps NaN payloads where ggml canonicalises: only the default
        # quiet NaN (which both map to sign | 0x7e00) may appear here
        nan_bits = set(row[np.isnan(row)].view(np.uint32).tolist())
        assert nan_bits <= {0x7fc00000, 0xffc00000}, nan_bits
        with np.errstate(over="ignore"):
            return row.astype(np.float16).view(np.uint8).tobytes()
    return quants.quantize(row.reshape(1, -1), T[name]).tobytes()


def random_blocks(name, rng):
    """Valid blocks of random bytes: every bit pattern of the quants, with the
    float scale fields set to finite values of mixed magnitude and sign."""
    bs, ts, half_offs = LAYOUT[name]
    nb = N // bs
    if name == "F16":
        h = rng.integers(0, 2 ** 16, size=N, dtype=np.uint32).astype(np.uint16)
        h = np.where((h & 0x7c00) == 0x7c00, h & 0x83ff, h)  # no inf/NaN
        h[:4] = [0x7c00, 0xfc00, 0x0001, 0x83ff]              # inf, -inf, subnormals
        return h.view(np.uint8).tobytes()
    if name == "BF16":
        h = rng.integers(0, 2 ** 16, size=N, dtype=np.uint32).astype(np.uint16)
        return h.view(np.uint8).tobytes()
    b = rng.integers(0, 256, size=(nb, ts), dtype=np.uint32).astype(np.uint8)
    for i in range(nb):
        for off in half_offs:
            e = rng.integers(-20, 3)
            d = np.float16(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0) * 2.0 ** e)
            if i == 1 and off == half_offs[0]:
                d = np.float16(0.0)           # a 32-block with zero scale
            b[i, off:off + 2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
        if name == "Q8_K":
            d = np.float32(rng.uniform(-1e-2, 1e-2))
            b[i, 0:4] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    return b.tobytes()


def dequantize_floats(name, raw):
    data = np.frombuffer(raw, dtype=np.uint8)
    if name == "Q8_1":   # d (half), s (half), 32 x int8
        b = data.reshape(-1, 36)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = b[:, 4:].copy().view(np.int8).astype(np.float32)
        return (q * d).reshape(-1)
    if name == "Q8_K":   # d (float), 256 x int8, 16 x int16
        b = data.reshape(-1, 292)
        d = b[:, 0:4].copy().view(np.float32)
        q = b[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1)
    if name == "BF16":
        return quants.dequantize(data, T.BF16).reshape(-1)
    if name == "F16":
        return data.view(np.float16).astype(np.float32)
    return quants.dequantize(data, T[name]).reshape(-1)


def c_bytes(b, indent="    "):
    out = []
    for i in range(0, len(b), 24):
        out.append(indent + ",".join("0x%02x" % x for x in b[i:i + 24]) + ",")
    return "\n".join(out)


def c_words(w, indent="    "):
    out = []
    for i in range(0, len(w), 8):
        out.append(indent + ",".join("0x%08xu" % int(x) for x in w[i:i + 8]) + ",")
    return "\n".join(out)


def main():
    rows = inputs() + [f16_edges()]
    n_quant_rows = len(rows) - 1  # the edge row is for F16/BF16 only

    blob = bytearray()
    words = []  # float bit patterns
    quant_entries = []
    deq_entries = []

    input_offs = []
    for r in rows:
        input_offs.append(len(words))
        words.extend(r.view(np.uint32).tolist())

    for name in QUANT_TYPES:
        for ri, r in enumerate(rows):
            if ri == n_quant_rows and name not in ("F16", "BF16"):
                continue
            qb = quantize_bytes(name, r)
            quant_entries.append((name, ri, len(blob), len(qb)))
            blob.extend(qb)

    rng = np.random.default_rng(99)
    for name in DEQUANT_TYPES:
        raw = random_blocks(name, rng)
        fl = np.ascontiguousarray(dequantize_floats(name, raw), dtype=np.float32)
        assert fl.size == N, (name, fl.size)
        deq_entries.append((name, len(blob), len(raw), len(words)))
        blob.extend(raw)
        words.extend(fl.view(np.uint32).tolist())

    p = print
    p("/* Generated by tools/gen_quant_vectors.py from gguf-py %s and numpy %s." % (
        importlib.metadata.version("gguf"), np.__version__))
    p(" * Do not edit: regenerate with")
    p(" *   python3 tools/gen_quant_vectors.py > tests/unit/data/quant_vectors.h")
    p(" * Independent reference values for test_quant.c (see the script). */")
    p("#ifndef FT_QUANT_VECTORS_H")
    p("#define FT_QUANT_VECTORS_H")
    p("")
    p("#include <stdint.h>")
    p("")
    p("#define QV_N %d /* elements per row */" % N)
    p("#define QV_N_INPUTS %d /* the last is the F16/BF16 edge-case row */" % len(rows))
    p("")
    p("/* Input rows (float bit patterns) at qv_words[qv_input_off[i]]. */")
    p("static const uint32_t qv_input_off[QV_N_INPUTS] = {%s};" % ", ".join(map(str, input_offs)))
    p("")
    p("/* quantize(input row) -> bytes at qv_blob[off], per gguf-py. */")
    p("struct qv_quant { const char *type; int input; uint32_t off, size; };")
    p("static const struct qv_quant qv_quant[] = {")
    for name, ri, off, size in quant_entries:
        p('    {"%s", %d, %u, %u},' % (name, ri, off, size))
    p("};")
    p("")
    p("/* dequantize(bytes at qv_blob[off]) -> QV_N floats at qv_words[floats], per gguf-py. */")
    p("struct qv_dequant { const char *type; uint32_t off, size, floats; };")
    p("static const struct qv_dequant qv_dequant[] = {")
    for name, off, size, fo in deq_entries:
        p('    {"%s", %u, %u, %u},' % (name, off, size, fo))
    p("};")
    p("")
    p("static const uint8_t qv_blob[%d] = {" % len(blob))
    p(c_bytes(blob))
    p("};")
    p("")
    p("static const uint32_t qv_words[%d] = {" % len(words))
    p(c_words(words))
    p("};")
    p("")
    p("#endif")


if __name__ == "__main__":
    main()
