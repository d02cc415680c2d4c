#!/usr/bin/env python3
"""Write tests/unit/data/gguf_pyfixture.gguf with gguf-py's GGUFWriter.

The fixture checks FreeToken's GGUF reader against the reference Python
implementation of the format: tests/unit/test_gguf.c hardcodes every value
written here, so change both together. The output is deterministic (no
random data, no timestamps); re-running the script must give the same bytes
(it prints the checksums the test hardcodes).

Usage: python3 tools/gen_gguf_fixture.py [OUT]
"""
import sys
import zlib
from pathlib import Path

import numpy as np
import gguf
from gguf import GGUFValueType as VT
from gguf import GGMLQuantizationType as QT

ROOT = Path(__file__).resolve().parent.parent
out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/unit/data/gguf_pyfixture.gguf"

w = gguf.GGUFWriter(str(out), arch="llama")  # adds general.architecture
w.add_custom_alignment(64)
w.add_uint8("t.u8", 200)
w.add_int8("t.i8", -100)
w.add_uint16("t.u16", 60000)
w.add_int16("t.i16", -30000)
w.add_uint32("t.u32", 4000000000)
w.add_int32("t.i32", -2000000000)
w.add_float32("t.f32", 1.5)
w.add_uint64("t.u64", 10000000000003)
w.add_int64("t.i64", -1099511627781)
w.add_float64("t.f64", 3.25)
w.add_float64("t.f64_big", 1e300)
w.add_bool("t.bool", True)
w.add_string("t.str", "h\u00e9llo \u2713")  # UTF-8: 68 c3 a9 6c 6c 6f 20 e2 9c 93
w.add_array("t.arr_i32", [1, -2, 3])  # python ints -> INT32
w.add_array("t.arr_f32", [0.5, -1.25])
w.add_key_value("t.arr_u8", [7, 8, 9, 255], VT.ARRAY, sub_type=VT.UINT8)
w.add_key_value("t.arr_i64", [-5, 1 << 40], VT.ARRAY, sub_type=VT.INT64)
w.add_array("t.arr_bool", [True, False, True])
w.add_array("t.arr_str", ["a", "", "ccc"])
w.add_array("t.nested", [[1, 2], [3]])  # array of INT32 arrays
w.add_array("t.nested_str", [["x"], ["y", "zz"]])  # array of string arrays

# Tensors (numpy shapes are reversed in GGUF: ne[0] is the last axis).
f32 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
w.add_tensor("w.f32", f32)
w.add_tensor("w.f16", np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float16))
w.add_tensor("w.i8", np.arange(24, dtype=np.int8).reshape(2, 3, 4))
x = (np.linspace(-1.0, 1.0, 2 * 64, dtype=np.float32)).reshape(2, 64)
q8 = gguf.quants.quantize(x, QT.Q8_0)  # uint8, shape (2, 68)
w.add_tensor("w.q8_0", q8, raw_dtype=QT.Q8_0)
# gguf-py cannot quantize to Q4_K: raw blocks with a byte pattern, 2 rows of
# 256 elements = 2 blocks of 144 bytes; byte i is (i * 37) % 251.
q4k = ((np.arange(2 * 144, dtype=np.uint32) * 37) % 251).astype(np.uint8).reshape(2, 144)
w.add_tensor("w.q4_k", q4k, raw_dtype=QT.Q4_K)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

for name, arr in (("q8_0", q8), ("q4_k", q4k)):
    print(f"{name}: {arr.nbytes} bytes crc32 0x{zlib.crc32(arr.tobytes()):08x}")
print(f"{out}: {out.stat().st_size} bytes, crc32 0x{zlib.crc32(out.read_bytes()):08x}")
