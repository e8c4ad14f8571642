#!/usr/bin/env bash
# tests/cuda.sh BUILD SHARED — `make test-cuda`, on a machine with a GPU:
#   1. every CUDA op against cpu.c on random inputs (test_backend_ops)
#   2. CPU vs CUDA logits on every shared model, and the goldens generated on
#      the GPU with near ties diagnosed (test_cuda_model)
#   3. the goldens (continuations, llama2.c's 200 tokens, perplexities)
#      through the command line with --gpu (tests/golden.py)
#   4. compute-sanitizer memcheck on a short generation and on the quick op test
# Prints each step's output; exits non-zero if any step failed.
set -u
build=${1:-build}; shared=${2:-../shared}
cd "$(dirname "$0")/.." || exit 1
export SHARED="$shared"
failed=()
step() {  # name, command...
    local name=$1; shift
    echo "== $name"
    if "$@"; then echo "== ok   $name"; else echo "== FAIL $name"; failed+=("$name"); fi
}
step "ops vs cpu.c" "$build/tests/test_backend_ops"
step "models vs cpu, goldens" "$build/tests/test_cuda_model"
for what in continuations bos200 ppl; do
    step "golden $what --gpu" env QUILL_ARGS=--gpu python3 tests/golden.py "$build/quill" "$shared" "$what"
done
cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ -x "$cs" ]; then
    step "memcheck: generation" "$cs" --tool memcheck --leak-check full --error-exitcode 1 \
        "$build/quill" --gpu -m "$shared/models/gguf/stories260K-Q4_K_M.gguf" --temp 0 -n 24 -q "Once upon a time"
    step "memcheck: sampling" "$cs" --tool memcheck --error-exitcode 1 \
        "$build/quill" --gpu -m "$shared/models/gguf/synth-qwen3-Q4_K_M.gguf" --seed 1 -n 8 -q "Hello"
    step "memcheck: ops" "$cs" --tool memcheck --error-exitcode 1 "$build/tests/test_backend_ops" --quick
else
    echo "== FAIL compute-sanitizer not found (looked for $cs)"
    failed+=("compute-sanitizer")
fi
echo "${failed[*]:+failed: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
