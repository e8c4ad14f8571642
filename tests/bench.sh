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
echo "== tokenizer encode speed (1 MiB texts, one thread)"
SHARED="$shared" "$build/tests/test_tokenizer" --bench
