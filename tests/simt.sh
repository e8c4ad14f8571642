#!/usr/bin/env bash
# tests/simt.sh BUILD SHARED — the CUDA backend (kernels*.cu) on the CPU, through
# the SIMT emulation (simt/; BUILD is a `make SIMT=1` build): the emulation's own
# checks (tests/simt_selftest.cu), every CUDA op
# against cpu.c with the block's threads run forward and then reversed, whole
# models against the CPU with the threads in a seeded random order, and golden
# continuations through `quill --gpu` (stories260K and two synthetic models).
# QUILL_SANITIZED=1 (the ASan+UBSan build) compares 8 tokens a model, not 24,
# and runs the goldens of those three models only. Prints what each step
# checked; exits non-zero if any failed.
set -u
build=${1:-build/simt}; shared=${2:-../shared}
cd "$(dirname "$0")/.." || exit 1
export SHARED="$shared"
pass=0; fail=0; failed=()
step() {  # name, command...
    local name=$1; shift
    local log; log=$(mktemp)
    if "$@" >"$log" 2>&1; then pass=$((pass+1)); echo "ok   $name: $(grep -c "^ok" "$log") ok lines"
    else fail=$((fail+1)); failed+=("$name"); echo "FAIL $name"; grep -v '^ok ' "$log" | tail -n 30 | sed 's/^/     /'; fi
    rm -f "$log"
}
# the emulation's own checks: CASE and the words its refusal must say (tests/simt_selftest.cu)
selftest() {
    local c words out
    while read -r c words; do
        out=$("$build/tests/simt_selftest" "$c" 2>&1) || { echo "FAIL $c: $out"; return 1; }
        [ -z "$words" ] || grep -qF -- "$words" <<<"$out" || { echo "FAIL $c: no '$words' in: $out"; return 1; }
        echo "ok   $c${words:+: $words}"
    done <<'EOF'
ok
graph
barrier-exit never completes: thread 5 has exited
two-barriers threads wait at different barriers
shfl-exited exited
shfl-missing names lane 16, which the block does not have
ldg-misaligned which is not 16-byte aligned
block-too-big more than 1024 threads per block
smem-limit over its limit of 49152
capture-malloc cudaMalloc during stream capture
capture-pageable pageable host memory during stream capture
EOF
}
step "simt: the emulation's own checks" selftest
step "simt: test_backend_ops, threads in order" env QUILL_SIMT_SEED=0 "$build/tests/test_backend_ops"
step "simt: test_backend_ops, threads reversed" env QUILL_SIMT_SEED=1 "$build/tests/test_backend_ops"
golden="stories260K.gguf synth-llama-Q4_K_M.gguf synth-qwen3-Q4_K_M.gguf"
# the sanitized build is several times slower: 8 steps a model and three models' goldens
if [ "${QUILL_SANITIZED:-0}" = 1 ]; then model_env=(QUILL_TEST_STEPS=8 GOLDEN_MODELS="$golden"); else model_env=(); fi
step "simt: test_cuda_model, threads in a random order" \
    env QUILL_SIMT_SEED=20261125 "${model_env[@]}" "$build/tests/test_cuda_model"
step "simt: golden continuations through quill --gpu" env QUILL_ARGS=--gpu GOLDEN_MODELS="$golden" \
    "${PYTHON:-/usr/bin/python3}" tests/golden.py "$build/quill" "$shared" continuations
# gemma3 over a 684-token prompt: its local layers' cache returns the blocks that left the
# window while the prompt runs, so the kernels must read only what it still holds
long_gemma() {
    local mg="$shared/models/gguf/synth-gemma3-Q4_K_M.gguf" p g c
    [ -f "$mg" ] || { echo "skip: $mg not found"; return 0; }
    p=$(head -c 2800 "$shared/golden/gpl-3.txt")
    g=$("$build/quill" --gpu -m "$mg" -c 1024 --temp 0 -n 12 -q "$p") || return 1
    c=$("$build/quill" --cpu -m "$mg" -c 1024 --temp 0 -n 12 -q "$p") || return 1
    [ "$g" = "$c" ] && echo "ok   gemma3, 684-token prompt: --gpu prints what the CPU prints" || { echo "FAIL gpu '$g' cpu '$c'"; return 1; }
}
[ "${QUILL_SANITIZED:-0}" = 1 ] || step "simt: gemma3 long prompt, sliding-window blocks returned" long_gemma
echo "${failed[*]:+failed: ${failed[*]}}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
