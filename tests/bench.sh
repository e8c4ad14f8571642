#!/usr/bin/env bash
# tests/bench.sh BUILD SHARED — `make bench`: prefill and decode speed of a
# Llama-3.2-1B-shaped model (random weights from models/synth.py, written once)
# in Q4_K_M and Q8_0 against the measured memory bandwidth, a long context with
# --kv f16 / q8, decode on a busy machine (CPU only), the tokenizer's speed, a chat
# template's rendering time (20 turns, the largest template in $SHARED/templates),
# the grammar's time per token for a JSON schema (32k and 128k vocabularies),
# quill batch as --parallel grows, and the cost of --resume's bookkeeping at 100k records.
# Prints numbers; asserts nothing. Environment (defaults in brackets):
#   BENCH_SHAPES [llama-3.2-1b]   BENCH_TYPES [Q4_K_M Q8_0]   BENCH_DIR [models]
#   QUILL_ARGS   extra quill options, e.g. --gpu [none]
#   BENCH_P [128] BENCH_N [64] BENCH_LONG_P [1024] BATCH_N [16] BATCH_PARALLEL [1 2 ... 64]
#   RESUME_RECORDS [100000; 0 leaves that part out]
#   BENCH_SPEC="TARGET_SHAPE DRAFT_SHAPE": also tests/bench_spec -k 8 on their Q4_K_M
#                files (on the GPU when QUILL_ARGS has --gpu, else on the CPU)
# The tokenizer and bench_spec parts run only where those programs are built.
set -eu
build=${1:-build}; shared=${2:-../shared}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
shapes=${BENCH_SHAPES:-llama-3.2-1b}
types=${BENCH_TYPES:-Q4_K_M Q8_0}
dir=${BENCH_DIR:-models}; dir=${dir%/}
args=${QUILL_ARGS:-}   # a list of options: expanded unquoted below
mkdir -p "$dir"
# model SHAPE TYPE: sets f to the synthetic model's file, writing it the first time
model() {
    f=$dir/synth-$1-$2.gguf
    [ -f "$f" ] || $PYTHON models/synth.py --shape "$1" --type "$2" --shared "$shared" -o "$f"
}
for shape in $shapes; do
    for type in $types; do
        model "$shape" "$type"
        echo "== $f"
        "$build/quill" bench $args -m "$f" -p "${BENCH_P:-128}" -n "${BENCH_N:-64}"
    done
done
# A long context: the KV cache's share of each decode step, fp16 against q8 (--kv q8)
for shape in $shapes; do
    model "$shape" Q4_K_M
    for kv in f16 q8; do
        echo "== $f, --kv $kv, ${BENCH_LONG_P:-1024}-token prompt"
        "$build/quill" bench $args -m "$f" -p "${BENCH_LONG_P:-1024}" -n "${BENCH_N:-64}" --kv $kv
    done
done
# A busy machine: decode while other processes (busy loops) hold one core,
# then every core. Work inside a matmul is claimed as threads go, so with a
# core taken all threads should not be slower than one, and with every core
# taken decode should slow in proportion rather than collapse.
if [ -z "$args" ]; then
    ncpu=$(nproc)
    for shape in $shapes; do
        model "$shape" Q4_K_M
        for busy in 0 1 "$ncpu"; do
            pids=()
            for ((i = 0; i < busy; i++)); do sh -c 'while :; do :; done' & pids+=($!); done
            for t in 1 "$ncpu"; do
                line=$("$build/quill" bench -m "$f" -p 16 -n "${BENCH_N:-64}" -t "$t" 2>/dev/null | grep "^decode")
                echo "== busy machine: $busy of $ncpu cores held by other processes, -t $t: ${line%%=*}"
            done
            [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}"
        done
    done
fi
if [ -x "$build/tests/test_tokenizer" ]; then
    echo "== tokenizer encode speed (1 MiB texts, one thread)"
    SHARED="$shared" "$build/tests/test_tokenizer" --bench
else
    echo "== tokenizer encode speed: skipped ($build/tests/test_tokenizer not built)"
fi
# Constrained decoding: the grammar's ms per token for a JSON schema on a 32k and a
# 128k vocabulary, beside the 1B-shape decode step it is added to (target: < 10%)
if [ -x "$build/tests/test_grammar" ]; then
    shape=${shapes%% *}
    model "$shape" Q4_K_M
    step=$("$build/quill" bench $args -m "$f" -p 16 -n "${BENCH_N:-64}" 2>/dev/null | sed -n 's/^decode.* = \([0-9.]*\) ms\/token.*/\1/p')
    echo "== grammar (JSON schema) beside the decode step of $f: ${step:-?} ms/token"
    SHARED="$shared" "$build/tests/test_grammar" --bench | while read -r line; do
        ms=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) ms\/token.*/\1/p')
        pct=$($PYTHON -c "print(f'{100 * $ms / $step:.1f}% of a decode step')" 2>/dev/null || echo "?")
        echo "$line = $pct"
    done
else
    echo "== grammar: skipped ($build/tests/test_grammar not built)"
fi
# A chat template: 20 turns rendered with the largest template in $SHARED/templates
if [ -x "$build/tests/test_template" ]; then
    largest=$(ls -S "$shared"/templates/*.jinja | head -n 1)
    echo "== chat template rendering"
    "$build/tests/test_template" bench "$largest"
else
    echo "== chat template rendering: skipped ($build/tests/test_template not built)"
fi
# Batched decode: aggregate tokens/s as --parallel grows (each step reads the
# weights once for every sequence; the curve flattens where the step turns
# from bandwidth-bound to compute-bound).
for shape in $shapes; do
    model "$shape" Q4_K_M
    echo "== quill batch on $f: ${BATCH_N:-16} tokens per prompt, as many prompts as --parallel"
    for p in ${BATCH_PARALLEL:-1 2 4 8 16 32 64}; do
        $PYTHON -c "import json,sys
for i in range($p): print(json.dumps({'prompt': f'prompt number {i} about a cat', 'n': ${BATCH_N:-16}}))" >"$build/batch_in.jsonl"
        "$build/quill" batch $args -m "$f" -c 256 --temp 0 --parallel "$p" -i "$build/batch_in.jsonl" \
            --stats-json "$build/batch_stats.json" -q >/dev/null
        $PYTHON -c "import json; s=json.load(open('$build/batch_stats.json'))
print(f'--parallel $p: {s[\"generated_tokens\"]} tokens in {s[\"wall_s\"]:.2f} s = {s[\"tok_s\"]:.1f} tok/s aggregate, mean TPOT {s[\"mean_tpot_ms\"]:.1f} ms, {s[\"steps\"]} steps')"
        cp "$build/batch_stats.json" "$build/batch_stats_last.json"
    done
done
# --resume's bookkeeping: RESUME_RECORDS records written once with -n 0 (no forward pass:
# reading, tokenizing, writing), then the same file resumed with every record done, a run
# that is nothing but the bookkeeping (the output's scan, each record's id hashed and looked
# up), set against what generating BATCH_N tokens for each record takes at the largest
# --parallel above.
nrec=${RESUME_RECORDS:-100000}
[ "$nrec" -gt 0 ] || shapes_resume=
for shape in ${shapes_resume-$shapes}; do
    model "$shape" Q4_K_M
    echo "== quill batch --resume bookkeeping on $f: $nrec records"
    $PYTHON -c "import json
for i in range($nrec): print(json.dumps({'id': f'rec-{i}', 'prompt': f'prompt number {i} about a cat', 'n': 0}))" \
        >"$build/resume_in.jsonl"
    "$build/quill" batch $args -m "$f" -c 256 -i "$build/resume_in.jsonl" -o "$build/resume_out.jsonl" \
        --stats-json "$build/resume_st0.json" -q
    "$build/quill" batch $args -m "$f" -c 256 -i "$build/resume_in.jsonl" -o "$build/resume_out.jsonl" --resume \
        --stats-json "$build/resume_st1.json" -q
    $PYTHON -c "import json
s0, s1, g = (json.load(open('$build/' + n)) for n in ('resume_st0.json', 'resume_st1.json', 'batch_stats_last.json'))
run = $nrec * ${BATCH_N:-16} / g['tok_s']
print(f'-n 0 over {$nrec} records (read, tokenize, write): {s0[\"wall_s\"]:.2f} s')
print(f'--resume with all {s1[\"resumed\"]} done (scan and skip): {s1[\"wall_s\"]:.2f} s = '
      f'{100 * s1[\"wall_s\"] / run:.3f}% of generating ${BATCH_N:-16} tokens for each at {g[\"tok_s\"]:.1f} tok/s ({run:.0f} s)')"
    rm -f "$build/resume_in.jsonl" "$build/resume_out.jsonl"
done
# Speculative decoding's costs: target passes over 1..9 positions and draft steps
if [ -n "${BENCH_SPEC:-}" ]; then
    if [ -x "$build/tests/bench_spec" ]; then
        read -r target draft _ <<<"$BENCH_SPEC"
        [ -n "$draft" ] || { echo "bench.sh: BENCH_SPEC needs two shapes, TARGET_SHAPE DRAFT_SHAPE" >&2; exit 2; }
        model "$draft" Q4_K_M; d=$f
        model "$target" Q4_K_M
        echo "== speculative costs: target $f, draft $d"
        gpu=; case " $args " in *" --gpu "*) gpu=--gpu ;; esac
        "$build/tests/bench_spec" "$f" "$d" -k 8 $gpu
    else
        echo "== speculative costs: skipped ($build/tests/bench_spec not built)"
    fi
fi
