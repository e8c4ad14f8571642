#!/usr/bin/env bash
# make bench: prefill and decode speed of a Llama-3.2-1B-shaped model (random
# weights from models/synth.py, written once into models/) in Q4_K_M and Q8_0,
# against the measured memory bandwidth. Prints numbers; asserts nothing.
set -eu
build=${1:-build}; shared=${2:-../shared}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
for type in Q4_K_M Q8_0; do
    f=models/synth-llama-3.2-1b-$type.gguf
    [ -f "$f" ] || $PYTHON models/synth.py --shape llama-3.2-1b --type "$type" --shared "$shared" -o "$f"
    echo "== $f"
    "$build/quill" bench -m "$f" -p "${BENCH_P:-128}" -n "${BENCH_N:-64}"
done
# A long context: the KV cache's share of each decode step, fp16 against q8 (--kv q8)
f=models/synth-llama-3.2-1b-Q4_K_M.gguf
for kv in f16 q8; do
    echo "== $f, --kv $kv, ${BENCH_LONG_P:-1024}-token prompt"
    "$build/quill" bench -m "$f" -p "${BENCH_LONG_P:-1024}" -n "${BENCH_N:-64}" --kv $kv
done
echo "== tokenizer encode speed (1 MiB texts, one thread)"
SHARED="$shared" "$build/tests/test_tokenizer" --bench
# Batched decode: aggregate tokens/s as --parallel grows (each step reads the
# weights once for every sequence; the curve flattens where the step turns
# from bandwidth-bound to compute-bound).
f=models/synth-llama-3.2-1b-Q4_K_M.gguf
echo "== quill batch on $f: ${BATCH_N:-16} tokens per prompt, as many prompts as --parallel"
for p in ${BATCH_PARALLEL:-1 2 4 8 16 32 64}; do
    $PYTHON -c "import json,sys
for i in range($p): print(json.dumps({'prompt': f'prompt number {i} about a cat', 'n': ${BATCH_N:-16}}))" >"$build/batch_in.jsonl"
    "$build/quill" batch -m "$f" -c 256 --temp 0 --parallel "$p" -i "$build/batch_in.jsonl" \
        --stats-json "$build/batch_stats.json" -q >/dev/null
    $PYTHON -c "import json; s=json.load(open('$build/batch_stats.json'))
print(f'--parallel $p: {s[\"generated_tokens\"]} tokens in {s[\"wall_s\"]:.2f} s = {s[\"tok_s\"]:.1f} tok/s aggregate, mean TPOT {s[\"mean_tpot_ms\"]:.1f} ms, {s[\"steps\"]} steps')"
done
