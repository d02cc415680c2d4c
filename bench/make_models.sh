#!/usr/bin/env bash
# The benchmark models, made locally (no downloads): a Llama 3.2 1B-shaped
# model with seeded random weights in F16 (ft gen-model, with the Llama 3
# vocabulary from tests/data/vocab), quantized to Q8_0, Q4_0 and Q4_K_M
# (ft quantize). Files that exist are kept, so a second run costs nothing.
# PRESET=qwen3moe-24e makes the mixture of experts of docs/performance.md
# (Qwen's vocabulary; F16 7.1 GiB, Q4_0 2.1 GiB).
#
# usage: bench/make_models.sh [DIR]     (default ~/.cache/freetoken-bench/models)
# env:   FT_BIN    the ft binary (default build/ft)
#        PRESET    ft gen-model preset (default llama3.2-1b)
#        TYPES     quantized types (default "Q8_0 Q4_0 Q4_K_M"; empty: F16 only)
#        FT_VOCAB  vocabulary GGUF (default tests/data/vocab/ggml-vocab-llama-bpe.gguf,
#                  ggml-vocab-qwen2.gguf for the qwen3moe presets;
#                  if absent, gen-model's synthetic vocabulary of the same size)
#        QUANTIZE  quantizer command taking IN OUT TYPE (default "$FT_BIN quantize";
#                  llama.cpp's llama-quantize takes the same arguments)
# Prints the paths of the models, one per line, on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
FT=${FT_BIN:-$ROOT/build/ft}
DIR=${1:-${FT_BENCH_MODELS:-$HOME/.cache/freetoken-bench/models}}
PRESET=${PRESET:-llama3.2-1b}
TYPES=${TYPES-Q8_0 Q4_0 Q4_K_M}
case $PRESET in
qwen3moe*) VOCAB=${FT_VOCAB:-$ROOT/tests/data/vocab/ggml-vocab-qwen2.gguf} ;;
*) VOCAB=${FT_VOCAB:-$ROOT/tests/data/vocab/ggml-vocab-llama-bpe.gguf} ;;
esac
QUANTIZE=${QUANTIZE:-$FT quantize}

if [ ! -x "$FT" ]; then
    echo "make_models: $FT not found: build ft first (cmake --build build) or set FT_BIN" >&2
    exit 1
fi
if [ -n "$TYPES" ] && [ "$QUANTIZE" = "$FT quantize" ] && ! "$FT" quantize --help >/dev/null 2>&1; then
    echo "make_models: $FT has no quantize command; set QUANTIZE to a quantizer taking IN OUT TYPE" \
         "(e.g. llama.cpp's llama-quantize)" >&2
    exit 1
fi
mkdir -p "$DIR"

base=$DIR/$PRESET-F16.gguf
if [ ! -f "$base" ]; then
    vocab_args=()
    if [ -f "$VOCAB" ]; then
        vocab_args=(--vocab "$VOCAB")
    else
        echo "make_models: $VOCAB not found: using a synthetic vocabulary of the preset's size" >&2
    fi
    "$FT" gen-model --preset "$PRESET" "${vocab_args[@]}" --type F16 --seed 1 -o "$base" >&2
fi
echo "$base"

for t in $TYPES; do
    out=$DIR/$PRESET-$t.gguf
    if [ ! -f "$out" ]; then
        echo "make_models: $QUANTIZE $base $out $t" >&2
        # Quantize to a temporary name so an interrupted run leaves no partial file.
        $QUANTIZE "$base" "$out.tmp" "$t" >&2
        mv "$out.tmp" "$out"
    fi
    echo "$out"
done
