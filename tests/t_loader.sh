#!/usr/bin/env bash
# tests/t_loader.sh — loading broken model files through the command line.
#   env: QUILL (quill binary), SHARED (../shared). Run from the repo root; exit 0 = pass.
#
# tests/corrupt.py writes one broken copy of stories260K per case: truncations spread over
# the whole file, patched header fields, rewritten tensor infos, and files that parse but
# are not a model quill can run. For each, `quill -m FILE -n 1 x` (and `quill info FILE`
# for faults in the GGUF structure itself) must exit with status 1 — not a signal, not a
# hang — and print exactly one stderr line "quill: ..." that contains the words naming the
# fault (extended regexes, all required). Positive controls check that the same command
# succeeds on the unbroken file, so the failures are the files' and not the command's.
# Under `make test-asan` QUILL is the sanitized binary and an ASan/UBSan report fails the
# one-line check.
set -u
SHARED=${SHARED:-../shared}
QUILL=${QUILL:-build/quill}
PY=${PYTHON:-/usr/bin/python3}
Q8="$SHARED/models/gguf/stories260K-Q8_0.gguf"
if [ ! -f "$Q8" ]; then
    echo "t_loader: $Q8 not found; skipped" >&2
    exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
LIMIT=20  # seconds before a run counts as hung
fails=0

report() {  # description, reason for failure (empty: pass)
    if [ -z "$2" ]; then echo "ok   $1"; return; fi
    echo "FAIL $1: $2"
    head -n 3 "$T/err" | cut -c 1-300 | sed 's/^/       stderr: /'
    fails=$((fails + 1))
}

# runs quill on no input with a time limit; stderr in $T/err, the status in $rc
runq() {
    timeout -k 2 "$LIMIT" "$QUILL" "$@" </dev/null >/dev/null 2>"$T/err"
    rc=$?
}

# fails_with DESCRIPTION REGEX... -- QUILL-ARGS...
# quill must exit 1 with one stderr line "quill: ..." matching every REGEX.
# (bash builtins only: the checks run ~200 times, under ASan too.)
fails_with() {
    local desc=$1 wants=() why="" w lines
    shift
    while [ "$1" != "--" ]; do wants+=("$1"); shift; done
    shift
    runq "$@"
    mapfile -t lines <"$T/err"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then why="hung: killed after ${LIMIT} s"
    elif [ "$rc" -ge 128 ]; then why="crashed: signal $((rc - 128))"
    elif [ "$rc" != 1 ]; then why="exit status $rc, expected 1"
    elif [ "${#lines[@]}" != 1 ]; then why="${#lines[@]} lines on stderr, expected 1"
    elif [[ ${lines[0]} != "quill: "* ]]; then why="stderr does not start with 'quill: '"
    else
        for w in "${wants[@]}"; do
            [[ ${lines[0]} =~ $w ]] || { why="message does not match '$w'"; break; }
        done
    fi
    report "$desc" "$why"
}

# succeeds DESCRIPTION QUILL-ARGS...: quill must exit 0.
succeeds() {
    local desc=$1 why=""
    shift
    runq "$@"
    [ "$rc" = 0 ] || why="exit status $rc, expected 0"
    report "$desc" "$why"
}

# broken FILE REGEX... : a fault in the GGUF structure: both generation and info refuse it.
# ($note, when set, is added to the description.)
broken() {
    local f=$1 d="$1${note:+ ($note)}"
    shift
    fails_with "$d: -m" "$@" -- -m "$T/$f.gguf" -n 1 x
    fails_with "$d: info" "$@" -- info "$T/$f.gguf"
}

# unrunnable FILE REGEX... : a valid GGUF that is not a model quill runs: info lists it,
# generation refuses it.
unrunnable() {
    local f=$1
    shift
    succeeds "$f: info parses it" info "$T/$f.gguf"
    fails_with "$f: -m" "$@" -- -m "$T/$f.gguf" -n 1 x
}

"$PY" tests/corrupt.py "$SHARED" "$T" || { echo "FAIL tests/corrupt.py could not write the files"; exit 1; }

# ---- controls: the command works on an intact file -------------------------------------
succeeds "intact Q8_0 file: -m" -m "$Q8" -n 1 -q x
succeeds "intact Q8_0 file: info" info "$Q8"
succeeds "trailing padding cut off: still a valid model" -m "$T/pad-trimmed.gguf" -n 1 -q x

# ---- truncations -----------------------------------------------------------------------
# The message must say the file ends early (a count too large for the bytes left, or a
# field or tensor running past the end); in the data, it names the tensor that is cut.
while IFS=$'\t' read -r n where; do
    case $where in
        header) if [ "$n" = 0 ]; then want="empty file"; else want="too small for a GGUF header"; fi ;;
        metadata|tensor-infos) want="past the end of the file|is too large" ;;
        padding) want="data section would start at offset [0-9]+, past the end of the file" ;;
        *) want="tensor '[a-z0-9_.]+': data \(.*\) runs past the end of the file \($n bytes\)" ;;
    esac
    note=$where broken "trunc-$n" "$want"
done <"$T/truncations.tsv"

# ---- the GGUF structure ----------------------------------------------------------------
broken magic "not a GGUF file" "'GGUX'"
broken magic-zeros "not a GGUF file"
broken version-1 "unsupported GGUF version 1 "
broken version-4 "unsupported GGUF version 4 "
broken version-bigendian "big-endian"
broken n-kv-huge "n_kv = 4611686018427387904 is too large"
broken n-tensors-huge "n_tensors = 18446744073709551615 is too large"
broken key-len-huge "key #0" "past the end of the file"
broken offset-past-end "'blk.4.ffn_up.weight'" "offset 1073741824" "past the end of the file"
broken offset-wraps "'blk.4.ffn_up.weight'" "past the end of the file"
broken offset-misaligned "'blk.0.attn_k.weight'" "not a multiple of the alignment 32"
broken dims-overflow "'blk.0.attn_q.weight'" "overflows"
broken dims-overflow-3d "'blk.0.attn_q.weight'" "overflows"
broken dims-zero "'blk.0.attn_q.weight'" "ne\[1\] = 0"
broken n-dims-5 "'blk.0.attn_q.weight'" "n_dims = 5"
broken block-misfit "'blk.0.attn_q.weight'" "ne\[0\] = 48" "Q8_0 block size 32"
broken type-99 "'blk.0.attn_q.weight'" "unknown ggml type 99"
broken dup-tensor "duplicate tensor 'blk.0.attn_q.weight'"
broken dup-key "duplicate key 'general.architecture'"
broken alignment-48 "general.alignment" "48 is not a non-zero power of two"
broken nested-array "tokenizer.ggml.scores" "nested arrays"
broken value-type-13 "general.name" "unknown value type 13"

# ---- valid GGUF, not a model quill runs --------------------------------------------------
# a type quill cannot run: the tensor, its type and the list of the types quill runs
runs="\(it runs F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS BF16 MXFP4\)$"
unrunnable type-q8_1 "'blk.0.attn_q.weight'" "type Q8_1," "cannot compute" "$runs"
if [ -f "$T/type-iq2_xxs.gguf" ]; then  # from synth-llama-Q8_0 (dim 256: whole K blocks)
    unrunnable type-iq2_xxs "'blk.0.attn_q.weight'" "type IQ2_XXS," "cannot compute" "$runs"
    unrunnable type-iq3_s "'blk.1.ffn_up.weight'" "type IQ3_S," "cannot compute" "$runs"
    unrunnable type-tq1_0 "'output.weight'" "type TQ1_0," "cannot compute" "$runs"
else
    echo "skip IQ2_XXS / IQ3_S / TQ1_0 tensors: $SHARED/models/gguf/synth-llama-Q8_0.gguf not found"
fi
unrunnable missing-ffn-up "tensor 'blk.0.ffn_up.weight' is missing"
unrunnable missing-embd "tensor 'token_embd.weight' is missing"
unrunnable shape-transposed "'blk.0.ffn_down.weight'" "expected shape \[172, 64\], found \[64, 172"
unrunnable shape-rows "'blk.2.attn_q.weight'" "expected shape \[64, 64\], found \[64, 32"
unrunnable block-count-6 "tensor 'blk.5.attn_norm.weight' is missing"
unrunnable arch-gpt9 "architecture 'gpt9' is not supported"
unrunnable arch-missing "general.architecture"
unrunnable missing-block-count "missing metadata key 'llama.block_count'"
unrunnable block-count-string "llama.block_count" "string"
unrunnable head-count-0 "heads 0"
unrunnable head-count-kv-3 "head_count_kv 3"
unrunnable dim-negative "llama.embedding_length" "-64"
# hyperparameters that would turn every activation into NaN
unrunnable eps-nan "llama.attention.layer_norm_rms_epsilon"
unrunnable freq-base-0 "llama.rope.freq_base"
unrunnable norm-f16 "'blk.0.attn_norm.weight'" "expected type F32, found F16"
unrunnable tokens-int32 "tokenizer.ggml.tokens" "expected array of string, found array of i32"
unrunnable tokens-scalar "tokenizer.ggml.tokens" "expected array of string"
unrunnable tokens-missing "tokenizer.ggml.tokens" "not found"
unrunnable scores-short "tokenizer.ggml.scores" "expected 512 elements, found 100"
unrunnable bos-out-of-range "bos_token_id" "9999"
# a mixture of experts whose expert keys or tensors are broken
if [ -f "$T/moe-shape.gguf" ]; then  # from synth-qwen3moe-Q8_0
    unrunnable moe-used-9 "qwen3moe.expert_used_count" "9 is not in 1 .. expert_count \(8\)"
    unrunnable moe-used-0 "qwen3moe.expert_used_count" "0 is not in"
    unrunnable moe-experts-0 "qwen3moe.expert_count" "0 experts"
    unrunnable moe-experts-7 "'blk.0.ffn_gate_exps.weight'" "expected shape \[256, 128, 7\], found \[256, 128, 8"
    unrunnable moe-no-expert-ffn "missing metadata key 'qwen3moe.expert_feed_forward_length'"
    unrunnable moe-missing-down "tensor 'blk.1.ffn_down_exps.weight' is missing"
    unrunnable moe-missing-router "tensor 'blk.0.ffn_gate_inp.weight' is missing"
    unrunnable moe-shape "'blk.2.ffn_up_exps.weight'" "expected shape \[256, 128, 8\], found \[256, 256, 4"
else
    echo "skip the MoE cases: $SHARED/models/gguf/synth-qwen3moe-Q8_0.gguf not found"
fi
# strings from the file quoted in a message: a newline or an escape must not break the line
unrunnable ctrl-arch "architecture" "not supported"
unrunnable ctrl-rope-scaling "rope scaling" "not supported"
unrunnable ctrl-tokenizer-model "tokenizer model" "not supported"
unrunnable ctrl-dup-piece "tokenizer.ggml.tokens" "appears twice"

# ---- not a file --------------------------------------------------------------------------
mkdir "$T/dir.gguf"
: >"$T/empty.gguf"
mkfifo "$T/fifo.gguf"
for mode in "-m" "info"; do
    args=(-n 1 x)
    [ "$mode" = info ] && args=()
    fails_with "directory: $mode" "dir.gguf: is a directory" -- "$mode" "$T/dir.gguf" "${args[@]}"
    fails_with "empty file: $mode" "empty.gguf: empty file" -- "$mode" "$T/empty.gguf" "${args[@]}"
    fails_with "nonexistent path: $mode" "nope.gguf: cannot open: No such file" -- "$mode" "$T/nope.gguf" "${args[@]}"
    fails_with "/dev/null: $mode" "/dev/null: is not a regular file" -- "$mode" /dev/null "${args[@]}"
    LIMIT=2 fails_with "FIFO with no writer: $mode" "fifo.gguf: is not a regular file" -- "$mode" "$T/fifo.gguf" "${args[@]}"
done

echo "$fails failed"
exit $((fails > 0))
