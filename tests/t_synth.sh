#!/usr/bin/env bash
# tests/t_synth.sh — models/synth.py writes valid GGUFs of every type and architecture.
#   env: SHARED (../shared), QUILL (quill binary; `quill info` checks are skipped when it
#   is not executable). Run from the repo root; exit 0 = pass.
#
# Each `tiny` model is checked structurally (models/check_synth.py: offsets, shapes,
# metadata, finite scales) and, where llama.cpp's own quantization of the same shape
# exists in ../shared/models/gguf/synth-*, against it: same tensors, types (llama-quantize's
# Q4_K_M / Q5_K_M mix and fallbacks) and shapes, same hyperparameters.
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -d "$SHARED/vocab" ]; then
    echo "t_synth: $SHARED/vocab not found; skipped" >&2
    exit 0
fi
ref=$SHARED/models/gguf
synth() {  # output name, synth.py arguments...
    local out=$tmp/$1.gguf; shift
    check "synth $*" $PY models/synth.py --shared "$SHARED" "$@" -o "$out"
}
like() {  # name, reference file (skipped when absent)
    if [ -f "$2" ]; then
        check "$1 matches llama.cpp's $(basename "$2")" $PY models/check_synth.py "$tmp/$1.gguf" --like "$2"
    else
        check "$1 is structurally valid" $PY models/check_synth.py "$tmp/$1.gguf"
    fi
}

for t in Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K Q2_K Q3_K_M IQ4_NL IQ4_XS; do
    synth "llama-$t" --shape tiny --type "$t"
    like "llama-$t" "$ref/synth-llama-$t.gguf"
done
synth qwen2-Q8_0 --shape tiny --arch qwen2 --type Q8_0
like qwen2-Q8_0 "$ref/synth-qwen2-Q8_0.gguf"
synth qwen3-Q4_K_M --shape tiny --arch qwen3 --type Q4_K_M
check "qwen3 structurally valid" $PY models/check_synth.py "$tmp/qwen3-Q4_K_M.gguf"
# (the shared qwen3 file predates the key_length/value_length keys: compare tensors only)
check "qwen3 tensors match llama.cpp's synth-qwen3-Q4_K_M" $PY -c '
import sys; sys.path.insert(0, "models")
from gguf_reader import GGUFReader
a, b = (GGUFReader(p).tensors for p in sys.argv[1:])
sys.exit(0 if {n: (t.type, t.shape) for n, t in a.items()} == {n: (t.type, t.shape) for n, t in b.items()} else 1)
' "$tmp/qwen3-Q4_K_M.gguf" "$ref/synth-qwen3-Q4_K_M.gguf"

for t in F32 F16 BF16 Q4_1 Q5_0 Q5_1 Q3_K Q4_K Q5_K MXFP4; do
    synth "llama-$t" --shape tiny --layers 2 --type "$t"
    like "llama-$t" /nonexistent
done
# rows of 320 fill no K-quant block: llama-quantize's fallbacks (Q5_0, Q8_0) must appear
synth odd --shape tiny --dim 320 --heads 5 --kv-heads 1 --ffn 640 --layers 2 --type Q4_K_M
like odd /nonexistent
check "odd dims fall back to Q5_0/Q8_0" sh -c "$PY models/gguf_reader.py '$tmp/odd.gguf' | grep -q 'attn_q.weight  *Q5_0' && $PY models/gguf_reader.py '$tmp/odd.gguf' | grep -q 'output.weight  *Q8_0'"
# llama-quantize's rules that the tiny shape does not reach: attn_v in Q5_K with 4 query
# heads per kv head, ffn_down of the first eighth of the layers in Q5_K; and rows of 640
# (no 256-block) falling back: IQ4_XS to IQ4_NL, Q5_K to Q5_1
synth iq4xs-gqa4 --shape tiny --heads 8 --kv-heads 2 --ffn 640 --layers 8 --type IQ4_XS
like iq4xs-gqa4 /nonexistent
check "IQ4_XS mix: attn_v Q5_K (gqa 4), ffn_down of layer 0 Q5_K (as Q5_1), rows of 640 IQ4_NL" sh -c "
    $PY models/gguf_reader.py '$tmp/iq4xs-gqa4.gguf' >'$tmp/iq4xs.txt' &&
    [ \$(grep -c 'attn_v.weight  *Q5_K' '$tmp/iq4xs.txt') = 8 ] && grep -q 'blk.0.attn_q.weight  *IQ4_XS' '$tmp/iq4xs.txt' &&
    grep -q 'blk.0.ffn_down.weight  *Q5_1' '$tmp/iq4xs.txt' && grep -q 'blk.1.ffn_down.weight  *IQ4_NL' '$tmp/iq4xs.txt'"
# a small Llama-3-style model: byte-level BPE vocabulary (128256), tied embedding, rope_freqs
synth l3 --shape llama-3.2-1b --dim 256 --ffn 512 --layers 2 --heads 4 --kv-heads 2 --type Q4_K_M
like l3 /nonexistent
synth qwen-small --shape qwen3-0.6b --dim 256 --ffn 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --type Q8_0
like qwen-small /nonexistent

synth seed-a --shape tiny --layers 1 --type Q4_K_M --seed 7
synth seed-b --shape tiny --layers 1 --type Q4_K_M --seed 7
synth seed-c --shape tiny --layers 1 --type Q4_K_M --seed 8
check "same seed, same bytes" cmp -s "$tmp/seed-a.gguf" "$tmp/seed-b.gguf"
check "other seed, other weights" sh -c "! cmp -s '$tmp/seed-a.gguf' '$tmp/seed-c.gguf'"

if [ -x "$QUILL" ]; then
    for f in "$tmp"/*.gguf; do
        check "quill info $(basename "$f")" sh -c "'$QUILL' info '$f' >/dev/null"
    done
else
    echo "t_synth: $QUILL not executable; quill info checks skipped" >&2
fi
exit $fail
