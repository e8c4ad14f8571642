#!/usr/bin/env bash
# tests/t_spec.sh — speculative decoding from the command line (--draft, --lookup).
#   env: SHARED (../shared), QUILL (the quill binary). Run from the repo root; exit 0 = pass.
#
# Greedy output with speculation must be byte-identical to quill's own output
# without it (the reference: the non-speculative decoder), for every target and
# draft pair below, and each pair must exercise the rollback: some drafted
# tokens accepted and some rejected (asserted from --stats-json). Pairs:
#   stories260K F32 drafted by its Q8_0 and Q4_0 files (llama.cpp's quantizations);
#   tinystories-656K drafted by a Q4_0 copy (models/convert.py --type);
#   every ../shared/models/gguf/synth-* drafted by another quantization of the same
#   weights (a shared file, or tests/requant.py), the mixture of experts qwen3moe too;
#   --lookup on repetitive prompts; a pair with q8 KV caches (--kv q8).
# Also: a draft with another vocabulary (size, or one token) is a one-line error;
# sampling with a draft is reproducible per seed. The exactness of sampling in
# law is tests/test_spec.c's.
set -u
. "$(dirname "$0")/lib.sh"
G=$SHARED/models/gguf
if [ ! -f "$G/stories260K.gguf" ]; then
    echo "t_spec: $G/stories260K.gguf not found (set SHARED)" >&2
    exit 1
fi

# stat KEY: a field of the last --stats-json
stat() { $PY -c "import json,sys; print(json.load(open('$tmp/s.json'))[sys.argv[1]])" "$1"; }

# same NAME TARGET "SPEC OPTIONS" QUILL ARGS...: greedy with and without speculation
# (one thread unless ARGS say otherwise: OpenMP crawls when other jobs share the cores);
# some drafts must be rejected, so that rollback runs, unless ALL_MAY_PASS=1
same() {
    local name=$1 target=$2 spec=$3; shift 3
    "$QUILL" -m "$target" -t 1 --temp 0 -q --stats-json "$tmp/p.json" "$@" >"$tmp/plain.txt" 2>"$tmp/err" ||
        { check "$name: plain run" false; cat "$tmp/err"; return; }
    # shellcheck disable=SC2086  # $spec is a list of options
    "$QUILL" -m "$target" -t 1 --temp 0 -q $spec --stats-json "$tmp/s.json" "$@" >"$tmp/spec.txt" 2>"$tmp/err" ||
        { check "$name: speculative run" false; cat "$tmp/err"; return; }
    check "$name: output identical" cmp -s "$tmp/plain.txt" "$tmp/spec.txt"
    check "$name: same length and finish" $PY -c "
import json; a, b = (json.load(open(f)) for f in ('$tmp/p.json', '$tmp/s.json'))
assert (a['generated_tokens'], a['finish_reason']) == (b['generated_tokens'], b['finish_reason']), (a, b)"
    local what="accepted and rejected" below="<"
    [ "${ALL_MAY_PASS:-0}" = 1 ] && what="accepted" below="<="
    check "$name: drafts $what ($(stat draft_accepted)/$(stat draft_tokens))" $PY -c "
import json; d = json.load(open('$tmp/s.json'))
assert 0 < d['draft_accepted'] $below d['draft_tokens'], d"
}

S="Once upon a time"
# stories260K: its context is 128, so this also ends at the context like the plain run.
# A Q8_0 draft of the same weights may agree at every position (it does on an H100):
# rejections are not required of it; the pairs below exercise them.
ALL_MAY_PASS=1 same "stories260K + Q8_0, 2 threads" "$G/stories260K.gguf" "--draft $G/stories260K-Q8_0.gguf" -t 2 -n 200 "Lily wanted to"
same "stories260K + Q4_0" "$G/stories260K.gguf" "--draft $G/stories260K-Q4_0.gguf" -n 100 "$S"
same "stories260K + Q4_0, fixed K 12" "$G/stories260K.gguf" \
    "--draft $G/stories260K-Q4_0.gguf --draft-max 12 --draft-fixed" -n 100 "Lily wanted to"
# the penalty history must include the drafted tokens before each position
same "stories260K + Q4_0, repeat penalty" "$G/stories260K.gguf" "--draft $G/stories260K-Q4_0.gguf" \
    -n 100 --repeat-penalty 1.5 --repeat-last-n 4 "$S"
same "stories260K + Q4_0, stop string" "$G/stories260K.gguf" "--draft $G/stories260K-Q4_0.gguf" \
    -n 100 --stop "sad" "$S"

# tinystories-656K (written by `make models`; converted here when absent)
T656=models/tinystories-656K.gguf
if [ ! -f "$T656" ]; then
    T656=$tmp/656K.gguf
    $PY models/convert.py "$SHARED/models/tinystories-656K" -o "$T656" >/dev/null
fi
check "656K: Q4_0 copy" $PY models/convert.py "$SHARED/models/tinystories-656K" --type Q4_0 -o "$tmp/656K-q4.gguf"
same "656K + Q4_0 copy" "$T656" "--draft $tmp/656K-q4.gguf" -n 120 "$S"

# synthetic models: each drafted by another quantization of the same weights
check "qwen2 Q4_0 copy" $PY tests/requant.py "$G/synth-qwen2-Q8_0.gguf" "$tmp/qwen2-q4.gguf" Q4_0
check "qwen3 Q4_0 copy" $PY tests/requant.py "$G/synth-qwen3-Q4_K_M.gguf" "$tmp/qwen3-q4.gguf" Q4_0
H="The quick brown fox"
# (these drafts cost 55-100% of their target per token, so adaptive K would
# hardly draft: K is fixed, to check the exactness of rounds of several sizes)
F="--draft-fixed --draft-max"
same "synth-llama Q8_0 + Q4_0" "$G/synth-llama-Q8_0.gguf" "$F 4 --draft $G/synth-llama-Q4_0.gguf" -n 48 "$H"
same "synth-llama Q6_K + Q4_0" "$G/synth-llama-Q6_K.gguf" "$F 3 --draft $G/synth-llama-Q4_0.gguf" -n 48 "$H"
same "synth-llama Q5_K_M + Q4_K_M" "$G/synth-llama-Q5_K_M.gguf" "$F 2 --draft $G/synth-llama-Q4_K_M.gguf" -n 48 "$H"
same "synth-llama Q4_K_M + Q4_0" "$G/synth-llama-Q4_K_M.gguf" "$F 5 --draft $G/synth-llama-Q4_0.gguf" -n 48 "$H"
# (no quantization quill runs has fewer bits than Q4_0: its draft is the Q4_K_M file)
same "synth-llama Q4_0 + Q4_K_M" "$G/synth-llama-Q4_0.gguf" "$F 1 --draft $G/synth-llama-Q4_K_M.gguf" -n 48 "$H"
same "synth-qwen2 Q8_0 + Q4_0" "$G/synth-qwen2-Q8_0.gguf" "$F 4 --draft $tmp/qwen2-q4.gguf" -n 48 "$H"
same "synth-qwen3 Q4_K_M + Q4_0" "$G/synth-qwen3-Q4_K_M.gguf" "$F 3 --draft $tmp/qwen3-q4.gguf" -n 48 "$H"
# a mixture of experts: the verification rows choose their experts and share the
# experts' matrix products, each row still computed as alone
same "synth-qwen3moe Q8_0 + Q4_K_M" "$G/synth-qwen3moe-Q8_0.gguf" "$F 3 --draft $G/synth-qwen3moe-Q4_K_M.gguf" -n 48 "$H"
same "synth-qwen3moe Q8_0 + Q4_K_M, fixed K 8" "$G/synth-qwen3moe-Q8_0.gguf" \
    "$F 8 --draft $G/synth-qwen3moe-Q4_K_M.gguf" -n 96 "def main():"
# Long rounds on Q4_K targets: the CPU Q4_K kernel sums groups of 4 prompt
# tokens in another order than a single token, and these outputs change if the
# verification pass ran its rows as prompt rows (model_forward) instead of
# decode rows (model_forward_batch with no prompt tokens).
same "synth-llama Q4_K_M + Q4_0, fixed K 8" "$G/synth-llama-Q4_K_M.gguf" \
    "$F 8 --draft $G/synth-llama-Q4_0.gguf" -n 128 "def main():"
same "synth-qwen3 Q4_K_M + Q4_0, fixed K 8" "$G/synth-qwen3-Q4_K_M.gguf" "$F 8 --draft $tmp/qwen3-q4.gguf" -n 128 "$H"
# a q8 KV cache in both models: rollback rewinds it like an fp16 one
same "synth-llama Q4_K_M + Q4_0, q8 KV" "$G/synth-llama-Q4_K_M.gguf" "$F 4 --draft $G/synth-llama-Q4_0.gguf" \
    -n 64 --kv q8 "$H"

# prompt lookup
R="Tom had a red ball. Tom had a red ball. Tom had a red ball. Tom had a"
same "stories260K --lookup" "$G/stories260K.gguf" "--lookup" -n 100 "$R"
same "656K --lookup" "$T656" "--lookup --draft-max 4" -n 100 "$R"

# sampling: runs, drafts, and repeats itself for a seed
sample() { "$QUILL" -m "$G/stories260K.gguf" --draft "$G/stories260K-Q8_0.gguf" --temp 0.8 --seed 11 -n 60 -q \
    --stats-json "$tmp/s.json" "$S"; }
sample >"$tmp/a.txt"
check "sampling with a draft: exit 0" test $? = 0
check "sampling with a draft: drafts accepted" $PY -c "
import json; d = json.load(open('$tmp/s.json')); assert 0 < d['draft_accepted'] <= d['draft_tokens'], d"
sample >"$tmp/b.txt"
check "sampling with a draft: same seed, same text" cmp -s "$tmp/a.txt" "$tmp/b.txt"

# errors: one line naming the problem, exit 1
err1() {  # description, quill args...: must fail with one "quill: " line containing the vocabulary
    local what=$1; shift
    "$QUILL" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    local rc=$?
    check "$what: exit 1" test "$rc" = 1
    # (a GPU build without a GPU adds its notice line: not counted)
    check "$what: one line" sh -c "[ \$(grep -vc 'running on the CPU' '$tmp/err') = 1 ] && grep -q '^quill: ' '$tmp/err'"
    check "$what: nothing on stdout" test ! -s "$tmp/out"
}
err1 "656K draft for stories260K" -m "$G/stories260K.gguf" --draft "$T656" -n 4 "$S"
check "vocabulary size mismatch: says so" grep -q "vocabulary" "$tmp/err"
check "vocabulary size mismatch: names the draft" grep -q "656K" "$tmp/err"
# same size, one token different
check "a draft with one token renamed" $PY -c "
import sys; sys.path.insert(0, 'models')
from gguf_reader import GGUFReader
from gguf_writer import GGUFWriter, VT
r = GGUFReader('$G/stories260K-Q8_0.gguf'); w = GGUFWriter('$tmp/renamed.gguf', r.alignment)
for k, v in r.kv.items():
    if k == 'tokenizer.ggml.tokens': v = list(v); v[300] = 'renamed'
    w.add(k, v, r.kv_types[k], r.kv_arr_types.get(k) if r.kv_types[k] == VT.ARRAY else None)
for n, t in r.tensors.items(): w.add_tensor(n, t.shape, t.type, bytes(r.tensor_bytes(t)))
w.write()"
err1 "a renamed token" -m "$G/stories260K.gguf" --draft "$tmp/renamed.gguf" -n 4 "$S"
check "a renamed token: names it" grep -q "token 300 is 'renamed'" "$tmp/err"
err1 "--draft with --lookup" -m "$G/stories260K.gguf" --draft "$G/stories260K-Q8_0.gguf" --lookup -n 4 "$S"
err1 "--draft-max 0" -m "$G/stories260K.gguf" --lookup --draft-max 0 -n 4 "$S"
err1 "a missing draft" -m "$G/stories260K.gguf" --draft "$tmp/missing.gguf" -n 4 "$S"
err1 "--draft in chat" -m "$G/stories260K.gguf" --draft "$G/stories260K-Q8_0.gguf" -i
exit $fail
