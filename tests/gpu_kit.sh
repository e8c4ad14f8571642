#!/usr/bin/env bash
# tests/gpu_kit.sh — the GPU checks and benchmarks, for a lent GPU machine that has
# no ../shared, no Debian -dev libraries and no network (the library's `device` tool).
#
# Here (the development machine):
#   tests/gpu_kit.sh pack
# builds quill and the GPU test programs into build/gpu (CUDA, -march=x86-64-v3 so
# they run on any recent x86-64) and fills three git-ignored folders, each under the
# 64 MiB one `device` call may carry:
#   .gpu/    the programs, the shared libraries they need that a CUDA image may lack,
#            the demo models, and part 1 of ../shared (stories260K, the 656K model,
#            the goldens, two synthetic models, the Llama-2 vocabulary)
#   .gpu-2/  synth-llama-{Q4_0,Q5_K_M,Q6_K}
#   .gpu-3/  synth-llama-Q8_0, synth-qwen2-Q8_0, the Llama-3 vocabulary (for bench)
#
# There (one `run` each, issued back to back so the machine stays warm and keeps
# what earlier calls carried):
#   carry [".gpu"]    tests/gpu_kit.sh env ops models goldens memcheck
#   carry [".gpu-2"]  tests/gpu_kit.sh models goldens
#   carry [".gpu-3"]  tests/gpu_kit.sh models goldens batch spec
#   (no carry)        tests/gpu_kit.sh bench
# Each step runs from the repository root with ../shared replaced by the union of
# the parts present (the goldens restricted to the models present, and the count
# of rows left out printed), logs to $OUT/STEP.log when $OUT is set, and the last
# lines are a table of steps and results. Exit status: the number of failed steps.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD

pack() {
    local shared=${SHARED:-../shared} b=build/gpu
    [ -d "$shared/models/gguf" ] || { echo "gpu_kit: $shared/models/gguf not found (set SHARED)" >&2; return 1; }
    make -s -j"$(nproc)" BUILD=$b OPT="-O3 -march=x86-64-v3" CUDA=1 \
        $b/quill $b/tests/test_backend_ops $b/tests/test_cuda_model $b/tests/bench_spec models || return 1
    rm -rf .gpu .gpu-2 .gpu-3
    mkdir -p .gpu/build/tests .gpu/lib .gpu/demo .gpu/shared/models/gguf .gpu/shared/vocab \
        .gpu-2/shared/models/gguf .gpu-3/shared/models/gguf .gpu-3/shared/vocab || return 1
    strip --strip-debug -o .gpu/build/quill $b/quill
    for t in test_backend_ops test_cuda_model bench_spec; do strip --strip-debug -o .gpu/build/tests/$t $b/tests/$t; done
    # Every library outside glibc, libstdc++ and libgcc (which any CUDA image has, and
    # whose newer copies Python's packages there may need).
    ldd $b/quill | awk '$3 ~ /^\// {print $3}' |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
        while read -r l; do cp -L "$l" .gpu/lib/; done
    cp models/stories260K.gguf models/stories260K-q80.gguf models/tinystories-656K.gguf .gpu/demo/
    cp -r "$shared/golden" .gpu/shared/
    cp -r "$shared/models/llama2c" "$shared/models/tinystories-656K" .gpu/shared/models/
    cp "$shared"/models/gguf/stories260K*.gguf "$shared"/models/gguf/synth-llama-Q4_K_M.gguf \
        "$shared"/models/gguf/synth-qwen3-Q4_K_M.gguf .gpu/shared/models/gguf/
    cp "$shared/vocab/ggml-vocab-llama-spm.gguf" .gpu/shared/vocab/
    cp "$shared"/models/gguf/synth-llama-{Q4_0,Q5_K_M,Q6_K}.gguf .gpu-2/shared/models/gguf/
    cp "$shared"/models/gguf/synth-{llama,qwen2}-Q8_0.gguf .gpu-3/shared/models/gguf/
    cp "$shared/vocab/ggml-vocab-llama-bpe.gguf" .gpu-3/shared/vocab/
    chmod -R u+w .gpu .gpu-2 .gpu-3
    du -sh .gpu .gpu-2 .gpu-3
    echo "gpu_kit: packed; carry .gpu, then .gpu-2, then .gpu-3 (see the top of tests/gpu_kit.sh)"
}

# ../shared for the steps: symlinks to every part present, the goldens filtered.
assemble() {
    S=/tmp/quill-shared
    rm -rf $S && mkdir -p $S/models/gguf $S/golden $S/vocab
    ln -s "$root/.gpu/shared/models/llama2c" "$root/.gpu/shared/models/tinystories-656K" $S/models/
    for d in .gpu .gpu-2 .gpu-3; do
        for f in "$root/$d"/shared/models/gguf/*.gguf "$root/$d"/shared/vocab/*; do
            [ -e "$f" ] && ln -sf "$f" "$S/${f#"$root/$d/shared/"}"
        done
    done
    cp .gpu/shared/golden/* $S/golden/
    for t in stories.tsv synth.tsv ppl.tsv; do
        awk -F'\t' -v dir=$S/models/gguf '{ p = dir "/" $1; ok = (getline _ < p) > 0; close(p)
                                           if (ok) print; else skipped++ }
            END { if (skipped) printf "gpu_kit: %s: %d rows left out (their models are in parts not carried)\n", FILENAME, skipped > "/dev/stderr" }' \
            .gpu/shared/golden/$t >$S/golden/$t
    done
    echo "gpu_kit: shared = $(ls $S/models/gguf | wc -l) GGUF files: $(cd $S/models/gguf && echo *)"
    for f in .gpu/demo/*.gguf; do [ -e "models/${f##*/}" ] || ln -s "$root/$f" "models/${f##*/}"; done
}

step_env() {
    nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    command -v nvcc >/dev/null && nvcc --version | tail -2
    grep -m1 'model name' /proc/cpuinfo; nproc
    grep -m1 -o -w 'avx512_vnni\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
    echo "libraries the programs need and the machine lacks (taken from .gpu/lib):"
    env -u LD_LIBRARY_PATH ldd .gpu/build/quill | grep 'not found' || echo "  none"
    echo "python: $PY $($PY -c 'import numpy, sys; print(sys.version.split()[0], "numpy", numpy.__version__)')"
    command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer
    .gpu/build/quill $BK -m models/stories260K.gguf --temp 0 -n 16 "Once upon a time"
}
step_ops() { .gpu/build/tests/test_backend_ops; }
step_models() { .gpu/build/tests/test_cuda_model; }
step_goldens() {
    local r=0 what
    for what in continuations bos200 ppl; do
        QUILL_ARGS=$BK $PY tests/golden.py .gpu/build/quill "$SHARED" $what || r=1
    done
    return $r
}
step_memcheck() {
    local cs r=0
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    "$cs" --tool memcheck --leak-check full --error-exitcode 1 .gpu/build/quill $BK \
        -m "$SHARED/models/gguf/stories260K-Q4_K_M.gguf" --temp 0 -n 24 -q "Once upon a time" || r=1
    "$cs" --tool memcheck --error-exitcode 1 .gpu/build/quill $BK --kv q8 \
        -m "$SHARED/models/gguf/synth-qwen3-Q4_K_M.gguf" --seed 1 -n 8 -q "Hello" || r=1
    "$cs" --tool memcheck --error-exitcode 1 .gpu/build/tests/test_backend_ops --quick || r=1
    return $r
}
# The batch and speculative tests run on the default backend, which must be the GPU.
on_default() {
    local b
    b=$(.gpu/build/quill -m models/stories260K.gguf -n 1 -q --stats-json /tmp/quill-default.json "Hi" >/dev/null &&
        $PY -c 'import json; print(json.load(open("/tmp/quill-default.json"))["backend"])') || return 1
    echo "default backend: $b"
    case "$b" in cuda*) ;; *) [ "$BK" = --cpu ] || { echo "gpu_kit: the default backend is not CUDA"; return 1; } ;; esac
    QUILL=.gpu/build/quill bash "$@"
}
step_batch() { on_default tests/t_batch.sh; }
step_spec() { on_default tests/t_spec.sh; }
step_bench() {
    local shape type f r=0
    mkdir -p /tmp/quill-bench
    for shape in llama-3.2-1b llama-3.1-8b; do
        for type in Q4_K_M Q8_0; do
            f=/tmp/quill-bench/$shape-$type.gguf
            [ -f "$f" ] || $PY models/synth.py --shape $shape --type $type --shared "$SHARED" -o "$f" || return 1
            echo "== $shape $type"
            .gpu/build/quill bench $BK -m "$f" -p 512 -n 128 || r=1
        done
        echo "== $shape Q4_K_M, 4096-token prompt, --kv f16 / q8"
        .gpu/build/quill bench $BK -m /tmp/quill-bench/$shape-Q4_K_M.gguf -p 4096 -n 128 || r=1
        .gpu/build/quill bench $BK -m /tmp/quill-bench/$shape-Q4_K_M.gguf -p 4096 -n 128 --kv q8 || r=1
        echo "== $shape Q4_K_M: quill batch, 64 tokens per prompt"
        for p in 1 2 4 8 16 32 64; do
            $PY -c "import json
for i in range($p): print(json.dumps({'prompt': f'prompt number {i} about a cat', 'n': 64}))" >/tmp/quill-bench/in.jsonl
            .gpu/build/quill batch $BK -m /tmp/quill-bench/$shape-Q4_K_M.gguf -c 256 --temp 0 --parallel $p \
                -i /tmp/quill-bench/in.jsonl --stats-json /tmp/quill-bench/s.json -q >/dev/null || r=1
            $PY -c "import json; s=json.load(open('/tmp/quill-bench/s.json'))
print(f'--parallel $p: {s[\"tok_s\"]:.1f} tok/s aggregate, mean TPOT {s[\"mean_tpot_ms\"]:.2f} ms')"
        done
    done
    echo "== speculative costs: 8B-shaped target, 1B-shaped draft"
    .gpu/build/tests/bench_spec /tmp/quill-bench/llama-3.1-8b-Q4_K_M.gguf /tmp/quill-bench/llama-3.2-1b-Q4_K_M.gguf -k 8 || r=1
    return $r
}

[ $# -ge 1 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
if [ "$1" = pack ]; then pack; exit; fi
[ -x .gpu/build/quill ] || { echo "gpu_kit: .gpu/build/quill not found: run 'tests/gpu_kit.sh pack' here and carry .gpu" >&2; exit 1; }
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=python3
$PY -c 'import numpy' 2>/dev/null || PY=/usr/bin/python3
export PYTHON=$PY
# KIT_CPU=1: a dry run of the kit itself where there is no GPU (--cpu, and the GPU
# test programs' "device" side on cpu.c).
if [ "${KIT_CPU:-0}" = 1 ]; then BK=--cpu; export QUILL_TEST_DEVICE=cpu; else BK=--gpu; fi
assemble
export SHARED=$S
results=()
fails=0
for s in "$@"; do
    declare -F "step_$s" >/dev/null || { echo "gpu_kit: unknown step $s (env ops models goldens memcheck batch spec bench)" >&2; exit 2; }
    log=${OUT:-/tmp}/$s.log
    t0=$(date +%s)
    echo "==== $s"
    step_"$s" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || fails=$((fails + 1))
    results+=("$(printf '%-9s %-4s %4ds  %s' "$s" "$([ "$rc" -eq 0 ] && echo ok || echo FAIL)" $(($(date +%s) - t0)) "$log")")
done
echo "==== summary"
printf '%s\n' "${results[@]}"
exit $fails
