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
#   .gpu-4/  synth-llama-{IQ4_NL,IQ4_XS,Q2_K,Q3_K_M}
#   .gpu-5/  synth-qwen3moe-{Q4_K_M,Q8_0}, synth-{gemma3,phi3,gptoss} (run where the CPU runs them)
# and, with `tests/gpu_kit.sh pack-peer LLAMA_BENCH` (llama.cpp's llama-bench, built
# with -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90, static ggml), a fourth:
#   .gpu-peer/  llama-bench (stripped, xz), the libraries it needs beyond glibc and CUDA
#               (lib/), the Llama-3 and Qwen2 vocabularies
#
# There (one `run` each, issued back to back so the machine stays warm and keeps
# what earlier calls carried):
#   carry [".gpu"]    tests/gpu_kit.sh env ops models goldens memcheck
#   carry [".gpu-2"]  tests/gpu_kit.sh models goldens
#   carry [".gpu-3"]  tests/gpu_kit.sh models goldens batch spec   (spec needs .gpu-2's models)
#   carry [".gpu-4"]  tests/gpu_kit.sh models goldens
#   carry [".gpu-5"]  tests/gpu_kit.sh models goldens
#   (no carry)        tests/gpu_kit.sh bench
#   carry [".gpu-peer"]  tests/gpu_kit.sh peer bench   (in place of the bench call above)
#   (after .gpu-3)    tests/gpu_kit.sh profile     (Nsight Compute; needs .gpu-3's vocabulary)
# A lease is short (15 minutes of device time, a start included): on an H200 the
# first call above took 23 s (env 2, ops 7, models 1, goldens 7, memcheck 5), the
# .gpu-3 one with batch 30 s, profile ~60 s; a call returns at most 8 files from
# $OUT, so the logs of a long step list are best read from its output.
# env describes the machine; ops models goldens memcheck batch spec are
# `tests/cuda.sh .gpu/build SHARED STEP`; bench is tests/bench.sh on the Llama-3.2-1B
# and Llama-3.1-8B shapes (models written to /tmp/quill-bench) with --gpu, plus
# bench_spec on the pair. peer: quill bench and llama.cpp's llama-bench, one after the
# other on the same files (-p 512 -n 128; PEER_MODELS, SHAPE:TYPE pairs, chooses them;
# LLAMA_BENCH names a llama-bench to run in place of .gpu-peer's). profile: each
# kernel of a decode step timed by ncu (tests/ncu_step.py; PROFILE_MODELS as
# PEER_MODELS). KIT_CPU=1: a dry run where there is no GPU (--cpu, and
# QUILL_TEST_DEVICE=cpu for cuda.sh). Each step runs from the repository root with
# ../shared replaced by the union of the parts present (the goldens restricted to
# the models present, and the count of rows left out printed), logs to
# $OUT/STEP.log ($OUT: /tmp when unset), and the last lines are a table of steps
# and results. Exit status: the number of failed steps.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD

# The shared libraries BIN needs into DIR: every one outside glibc, libstdc++ and
# libgcc (which any CUDA image has, and whose newer copies Python's packages there
# may need) and outside CUDA's own (the device's toolkit has them).
host_libs() {
    ldd "$1" | awk '$3 ~ /^\// {print $3}' |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' |
        while read -r l; do cp -L "$l" "$2"/; done
}

pack() {
    local shared=${SHARED:-../shared} b=build/gpu
    [ -d "$shared/models/gguf" ] || { echo "gpu_kit: $shared/models/gguf not found (set SHARED)" >&2; return 1; }
    make -s -j"$(nproc)" BUILD=$b OPT="-O3 -march=x86-64-v3" CUDA=1 \
        $b/quill $b/tests/test_backend_ops $b/tests/test_cuda_model $b/tests/bench_spec models || return 1
    rm -rf .gpu .gpu-2 .gpu-3 .gpu-4 .gpu-5
    mkdir -p .gpu/build/tests .gpu/lib .gpu/demo .gpu/shared/models/gguf .gpu/shared/vocab \
        .gpu-{2,3,4,5}/shared/models/gguf .gpu-3/shared/vocab || return 1
    strip -s -o .gpu/build/quill $b/quill
    for t in test_backend_ops test_cuda_model bench_spec; do strip -s -o .gpu/build/tests/$t $b/tests/$t; done
    host_libs $b/quill .gpu/lib
    cp models/stories260K-q80.gguf models/tinystories-656K.gguf .gpu/demo/  # (models/stories260K.gguf travels with the tree)
    cp -r "$shared/golden" .gpu/shared/
    cp -r "$shared/models/llama2c" "$shared/models/tinystories-656K" .gpu/shared/models/
    cp "$shared"/models/gguf/stories260K*.gguf "$shared"/models/gguf/synth-llama-Q4_K_M.gguf \
        "$shared"/models/gguf/synth-qwen3-Q4_K_M.gguf .gpu/shared/models/gguf/
    cp "$shared/vocab/ggml-vocab-llama-spm.gguf" .gpu/shared/vocab/
    cp "$shared"/models/gguf/synth-llama-{Q4_0,Q5_K_M,Q6_K}.gguf .gpu-2/shared/models/gguf/
    cp "$shared"/models/gguf/synth-{llama,qwen2}-Q8_0.gguf .gpu-3/shared/models/gguf/
    cp "$shared/vocab/ggml-vocab-llama-bpe.gguf" .gpu-3/shared/vocab/
    cp "$shared"/models/gguf/synth-llama-{IQ4_NL,IQ4_XS,Q2_K,Q3_K_M}.gguf .gpu-4/shared/models/gguf/
    cp "$shared"/models/gguf/synth-{qwen3moe-Q4_K_M,qwen3moe-Q8_0,gemma3-Q4_K_M,phi3-Q8_0,gptoss-MXFP4}.gguf \
        .gpu-5/shared/models/gguf/
    chmod -R u+w .gpu .gpu-2 .gpu-3 .gpu-4 .gpu-5
    du -sh .gpu .gpu-2 .gpu-3 .gpu-4 .gpu-5
    echo "gpu_kit: packed; carry .gpu, then .gpu-2, .gpu-3, .gpu-4, .gpu-5 (see the top of tests/gpu_kit.sh)"
}

pack_peer() {
    local lb=${1:-} shared=${SHARED:-../shared}
    [ -x "$lb" ] || { echo "gpu_kit: pack-peer needs llama.cpp's llama-bench (CUDA build) as its argument" >&2; return 1; }
    rm -rf .gpu-peer && mkdir -p .gpu-peer/shared/vocab .gpu-peer/lib || return 1
    host_libs "$lb" .gpu-peer/lib  # (a build with OpenSSL and OpenMP: libssl, libcrypto, libgomp)
    strip -o .gpu-peer/llama-bench "$lb" && xz -9 -T0 .gpu-peer/llama-bench || return 1
    cp "$shared"/vocab/ggml-vocab-{llama-bpe,qwen2}.gguf .gpu-peer/shared/vocab/ && chmod -R u+w .gpu-peer
    du -sh .gpu-peer
}

# ../shared for the steps: symlinks to every part present, the goldens filtered.
assemble() {
    S=/tmp/quill-shared
    rm -rf $S && mkdir -p $S/models/gguf $S/golden $S/vocab
    ln -s "$root/.gpu/shared/models/llama2c" "$root/.gpu/shared/models/tinystories-656K" $S/models/
    for d in .gpu .gpu-2 .gpu-3 .gpu-4 .gpu-5 .gpu-peer; do
        for f in "$root/$d"/shared/models/gguf/*.gguf "$root/$d"/shared/vocab/*; do
            [ -e "$f" ] && ln -sf "$f" "$S/${f#"$root/$d/shared/"}"
        done
    done
    cp .gpu/shared/golden/* $S/golden/
    for t in stories.tsv synth.tsv ppl.tsv synth2.tsv ppl2.tsv; do
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
# The benchmarks are tests/bench.sh's; the checks are tests/cuda.sh's steps (below).
step_bench() {
    BENCH_SHAPES="llama-3.2-1b llama-3.1-8b" BENCH_DIR=/tmp/quill-bench QUILL_ARGS=$BK \
        BENCH_P=512 BENCH_N=128 BENCH_LONG_P=4096 BATCH_N=64 BATCH_PARALLEL="1 4 16 64" RESUME_RECORDS=0 BENCH_SPEC="llama-3.1-8b llama-3.2-1b" \
        tests/bench.sh .gpu/build "$SHARED"
}

# Where a decode step's time goes: Nsight Compute times every kernel of a short
# generation (serialized) on the Llama-3.2-1B and Llama-3.1-8B shapes (Q4_K_M;
# PROFILE_MODELS, SHAPE:TYPE pairs, chooses them), and tests/ncu_step.py prints
# the last step's kernels by time, with the bytes each read, against the
# bandwidth quill bench measures.
step_profile() {
    local ncu m shape type f bw
    ncu=$(command -v ncu || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ncu")
    [ -x "$ncu" ] || { echo "gpu_kit: ncu not found (looked for $ncu)"; return 1; }
    mkdir -p /tmp/quill-bench
    for m in ${PROFILE_MODELS:-llama-3.2-1b:Q4_K_M llama-3.1-8b:Q4_K_M}; do
        shape=${m%%:*} type=${m#*:} f=/tmp/quill-bench/synth-$shape-$type.gguf
        [ -f "$f" ] || $PY models/synth.py --shape "$shape" --type "$type" --shared "$SHARED" -o "$f" || return 1
        bw=$(.gpu/build/quill bench $BK -m "$f" -p 16 -n 4 2>&1 | sed -n 's/^device memory bandwidth (measured[^:]*: \([0-9.]*\) GB\/s.*/\1/p')
        echo "== $f (sampled decode: temperature 0.8, top-k 40), device bandwidth ${bw:-?} GB/s"
        "$ncu" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size --csv \
            --log-file /tmp/quill-profile.csv .gpu/build/quill $BK -m "$f" -n 3 -q "Hello" >/dev/null || return 1
        $PY tests/ncu_step.py /tmp/quill-profile.csv ${bw:+--bandwidth "$bw"} || return 1
    done
}

# The peer, side by side: quill bench, then llama-bench, on each file in turn.
step_peer() {
    local lb=${LLAMA_BENCH:-/tmp/llama-bench} libs m shape type f
    if [ -z "${LLAMA_BENCH:-}" ]; then
        [ -f .gpu-peer/llama-bench.xz ] || { echo "gpu_kit: .gpu-peer/llama-bench.xz not found: run 'tests/gpu_kit.sh pack-peer LLAMA_BENCH' here and carry .gpu-peer"; return 1; }
        $PY -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
            .gpu-peer/llama-bench.xz "$lb" && chmod +x "$lb" || return 1
    fi
    # llama-bench links the CUDA runtime, cuBLAS and NCCL dynamically: the toolkit's, or Python's nvidia packages'
    libs=$($PY -c 'import glob, nvidia; print(":".join(glob.glob(nvidia.__path__[0] + "/*/lib")))' 2>/dev/null)
    mkdir -p /tmp/quill-bench
    for m in ${PEER_MODELS:-llama-3.2-1b:Q4_K_M llama-3.2-1b:Q8_0 llama-3.1-8b:Q4_K_M llama-3.1-8b:Q8_0 llama-3.2-1b:Q3_K_M llama-3.2-1b:IQ4_XS qwen3moe-mini:Q4_K_M}; do
        shape=${m%%:*} type=${m#*:} f=/tmp/quill-bench/synth-$shape-$type.gguf
        [ -f "$f" ] || $PY models/synth.py --shape "$shape" --type "$type" --shared "$SHARED" -o "$f" || return 1
        echo "== $f: quill"
        .gpu/build/quill bench $BK -m "$f" -p 512 -n 128 || return 1
        echo "== $f: llama.cpp"
        LD_LIBRARY_PATH=$root/.gpu-peer/lib:${CUDA_HOME:-/usr/local/cuda}/lib64:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
            "$lb" -m "$f" -p 512 -n 128 -r 3 -ngl 99 || return 1
    done
}

[ $# -ge 1 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
if [ "$1" = pack ]; then pack; exit; fi
if [ "$1" = pack-peer ]; then pack_peer "${2:-}"; exit; fi
for s in "$@"; do
    case $s in env | bench | peer | profile | ops | models | goldens | memcheck | batch | spec) ;;
    *) echo "gpu_kit: unknown step $s (env ops models goldens memcheck batch spec bench peer profile)" >&2; exit 2 ;; esac
done
[ -x .gpu/build/quill ] || { echo "gpu_kit: .gpu/build/quill not found: run 'tests/gpu_kit.sh pack' here and carry .gpu" >&2; exit 1; }
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=python3
$PY -c 'import numpy' 2>/dev/null || PY=/usr/bin/python3
export PYTHON=$PY
# KIT_CPU=1: a dry run of the kit itself where there is no GPU (cuda.sh's dry run).
if [ "${KIT_CPU:-0}" = 1 ]; then BK=--cpu; export QUILL_TEST_DEVICE=cpu; else BK=--gpu; fi
assemble
export SHARED=$S
mkdir -p "${OUT:-/tmp}"
results=()
fails=0
for s in "$@"; do
    case $s in
    env | bench | peer | profile) cmd=(step_"$s") ;;
    *) cmd=(tests/cuda.sh .gpu/build "$SHARED" "$s") ;;
    esac
    log=${OUT:-/tmp}/$s.log
    t0=$(date +%s)
    echo "==== $s"
    "${cmd[@]}" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || fails=$((fails + 1))
    results+=("$(printf '%-9s %-4s %4ds  %s' "$s" "$([ "$rc" -eq 0 ] && echo ok || echo FAIL)" $(($(date +%s) - t0)) "$log")")
done
echo "==== summary"
printf '%s\n' "${results[@]}"
exit $fails
