#!/usr/bin/env bash
# tests/cuda.sh BUILD SHARED [STEP...] — `make test-cuda`, on a machine with a GPU;
# the one definition of the GPU checks (tests/gpu_kit.sh runs them step by step).
# Steps (default: all, in this order):
#   ops       every CUDA op against cpu.c on random inputs (test_backend_ops)
#   models    CPU vs CUDA logits on every shared model, and the goldens generated
#             on the GPU with near ties diagnosed (test_cuda_model)
#   goldens   llama2.c's 200 tokens and the perplexities through the command
#             line with --gpu (tests/golden.py); the continuations are the models
#             step's, which tells a near tie that fp rounding may flip (the CPU's
#             margin within the backends' logit noise) from a real difference
#   memcheck  compute-sanitizer memcheck on short generations and the quick op test
#   batch     tests/t_batch.sh on the default backend, which must be CUDA
#   spec      tests/t_spec.sh on the default backend, which must be CUDA
# QUILL_TEST_DEVICE=cpu: a dry run without a GPU (--cpu instead of --gpu, the C
# harnesses' "device" side on cpu.c, no CUDA check of the default backend, and
# memcheck skipped when compute-sanitizer is absent). PYTHON: as in tests/lib.sh.
# Prints each check's output; exits non-zero if any check failed.
set -u
build=${1:-build}; shared=${2:-../shared}
shift $(($# < 2 ? $# : 2))
cd "$(dirname "$0")/.." || exit 1
export SHARED="$shared"
PY=${PYTHON:-/usr/bin/python3}
dry=0; BK=--gpu
if [ "${QUILL_TEST_DEVICE:-}" = cpu ]; then dry=1; BK=--cpu; fi
all=(ops models goldens memcheck batch spec)
[ $# -gt 0 ] || set -- "${all[@]}"
for s in "$@"; do
    case " ${all[*]} " in *" $s "*) ;; *) echo "cuda.sh: unknown step $s (${all[*]})" >&2; exit 2 ;; esac
done
failed=()
step() {  # name, command...
    local name=$1; shift
    echo "== $name"
    if "$@"; then echo "== ok   $name"; else echo "== FAIL $name"; failed+=("$name"); fi
}

# The batch and speculative tests take the default backend: it must be CUDA, so
# that a silent fallback to the CPU does not pass as a GPU test.
on_default() {  # test script
    local f b r
    f=$(mktemp)
    b=$("$build/quill" -m "$shared/models/gguf/stories260K.gguf" -n 1 -q --stats-json "$f" Hi >/dev/null &&
        "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["backend"])' "$f")
    r=$?; rm -f "$f"
    [ $r -eq 0 ] || { echo "cuda.sh: could not read the default backend"; return 1; }
    echo "default backend: $b"
    if [ $dry = 1 ]; then
        echo "QUILL_TEST_DEVICE=cpu: the check that it is CUDA is skipped"
    else
        case "$b" in cuda*) ;; *) echo "cuda.sh: the default backend is not CUDA ($b)"; return 1 ;; esac
    fi
    QUILL="$build/quill" SHARED="$shared" bash "$1"
}

memcheck() {
    local cs
    cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
    if [ ! -x "$cs" ]; then
        if [ $dry = 1 ]; then
            echo "== skipped memcheck: compute-sanitizer not found (looked for $cs; QUILL_TEST_DEVICE=cpu)"
        else
            echo "== FAIL compute-sanitizer not found (looked for $cs)"
            failed+=("compute-sanitizer")
        fi
        return
    fi
    step "memcheck: generation" "$cs" --tool memcheck --leak-check full --error-exitcode 1 \
        "$build/quill" $BK -m "$shared/models/gguf/stories260K-Q4_K_M.gguf" --temp 0 -n 24 -q "Once upon a time"
    step "memcheck: sampling, --kv q8" "$cs" --tool memcheck --error-exitcode 1 \
        "$build/quill" $BK --kv q8 -m "$shared/models/gguf/synth-qwen3-Q4_K_M.gguf" --seed 1 -n 8 -q "Hello"
    step "memcheck: ops" "$cs" --tool memcheck --error-exitcode 1 "$build/tests/test_backend_ops" --quick
}

for s in "$@"; do
    case $s in
    ops) step "ops vs cpu.c" "$build/tests/test_backend_ops" ;;
    models) step "models vs cpu, goldens" "$build/tests/test_cuda_model" ;;
    goldens)
        for what in bos200 ppl; do
            step "golden $what $BK" env QUILL_ARGS=$BK "$PY" tests/golden.py "$build/quill" "$shared" "$what"
        done ;;
    memcheck) memcheck ;;
    batch) step "batch on the default backend" on_default tests/t_batch.sh ;;
    spec) step "spec on the default backend" on_default tests/t_spec.sh ;;
    esac
done
echo "${failed[*]:+failed: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
