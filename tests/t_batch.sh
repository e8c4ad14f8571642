#!/usr/bin/env bash
# quill batch: continuous batching over the paged KV cache gives, for every
# record, exactly what quill gives for that prompt alone (greedy), whatever
# --parallel, --chunk and --kv-mem; shared prefixes are prefilled once; bad
# records become error records without losing the others.
set -u
. "$(dirname "$0")/lib.sh"
M="$SHARED/models/gguf/stories260K.gguf"
C="$PY tests/batch_check.py"
q() { "$QUILL" batch -m "$M" -c 512 --temp 0 -q "$@"; }

$C write-mix "$tmp/mix.jsonl"
$C alone "$QUILL" "$M" "$tmp/mix.jsonl" "$tmp/want.jsonl" -c 512
for p in 1 4 16; do
    q --parallel $p -i "$tmp/mix.jsonl" -o "$tmp/got$p.jsonl" --stats-json "$tmp/st$p.json"
    check "--parallel $p: exit 0" test $? = 0
    check "--parallel $p: every record equals its prompt run alone, in input order" \
        $C same "$tmp/want.jsonl" "$tmp/got$p.jsonl"
done
q --parallel 4 --chunk 64 --unordered -i "$tmp/mix.jsonl" >"$tmp/got_c64.jsonl"
check "--chunk 64 --unordered: the same records" $C same "$tmp/want.jsonl" "$tmp/got_c64.jsonl" --any-order

# a q8 KV cache (--kv q8) on a synthetic llama (head size 64): the same invariance
MQ="$SHARED/models/gguf/synth-llama-Q8_0.gguf"
$C alone "$QUILL" "$MQ" "$tmp/mix.jsonl" "$tmp/want_q8.jsonl" -c 512 --kv q8
"$QUILL" batch -m "$MQ" -c 512 --temp 0 -q --kv q8 --parallel 4 --chunk 64 -i "$tmp/mix.jsonl" -o "$tmp/got_q8.jsonl"
check "--kv q8 --parallel 4 --chunk 64: every record equals its prompt run alone" \
    $C same "$tmp/want_q8.jsonl" "$tmp/got_q8.jsonl"

# the shared system prompt (> 128 tokens) of records r0, r3, r6, r9, r12 is prefilled once
shared() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["shared_prefix_tokens"])' "$1"; }
computed() { $PY -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["prompt_tokens"]-s["prefill_tokens"])' "$1"; }
check "--parallel 4: shared prefix taken 4 times (>= 4 x 128 tokens)" test "$(shared "$tmp/st4.json")" -ge 512
check "--parallel 4: prompt tokens computed = total - shared" test "$(computed "$tmp/st4.json")" = "$(shared "$tmp/st4.json")"
check "--parallel 1: the finished prompt's prefix is kept and shared too" test "$(shared "$tmp/st1.json")" -ge 512

# a pool of 40 blocks (640 positions) holds one or two sequences: the others wait, nothing fails
q --parallel 8 --kv-mem 400K -i "$tmp/mix.jsonl" >"$tmp/got_small.jsonl"
check "--kv-mem 400K: exit 0 (sequences wait for room)" test $? = 0
check "--kv-mem 400K: the same records" $C same "$tmp/want.jsonl" "$tmp/got_small.jsonl"

# bad records: error records with their line numbers, the rest intact
long=$($PY -c 'print(" ".join(["cat"] * 700))')
{
    echo '{"id": "ok1", "prompt": "Once upon a time", "n": 8}'
    echo 'not json'
    echo ''
    echo '{"id": "noprompt", "n": 3}'
    echo '{"id": "bad-n", "prompt": "x", "n": "five"}'
    echo "{\"id\": \"long\", \"prompt\": \"$long\", \"n\": 4}"
    printf '{"id": "utf8", "prompt": "caf\xe9"}\n'
    echo '{"id": "extra", "prompt": "x", "colour": 1}'
    echo '{"id": "ok2", "prompt": "Lily went", "n": 6}'
} >"$tmp/bad.jsonl"
q -i "$tmp/bad.jsonl" >"$tmp/bad.out" 2>"$tmp/bad.err"
check "bad records: exit status 1" test $? = 1
check "bad records: one final line on stderr says how many failed" grep -q "6 of 8 input records failed" "$tmp/bad.err"
errs() { $PY - "$tmp/bad.out" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ids = [r["id"] for r in recs]
assert ids == ["ok1", 2, "noprompt", "bad-n", "long", 7, "extra", "ok2"], ids
lines = {r["id"]: r.get("line") for r in recs if "error" in r}
assert lines == {2: 2, "noprompt": 4, "bad-n": 5, "long": 6, 7: 7, "extra": 8}, lines
assert "context" in [r for r in recs if r["id"] == "long"][0]["error"]
assert all(r["tokens"] > 0 for r in recs if "error" not in r)
EOF
}
check "bad records: error records with line numbers; valid records all there, in order" errs

: >"$tmp/empty"
q -i "$tmp/empty" >"$tmp/empty.out"
check "empty input: exit 0, no output" test $? = 0 -a ! -s "$tmp/empty.out"

printf 'Once upon a time\n\nThe dog\n' | q --lines -n 6 >"$tmp/lines.out"
check "--lines: one record per non-blank line, ids are line numbers" \
    $PY -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert [x["id"] for x in r]==[1,3] and r[0]["tokens"]==6' "$tmp/lines.out"
q --chunk 100 -i "$tmp/empty" 2>"$tmp/chunk.err"
check "--chunk not a multiple of 64: exit 1 with a message" grep -q "multiple of 64" "$tmp/chunk.err"
q --draft "$M" -i "$tmp/empty" 2>"$tmp/draft.err"
check "--draft in batch mode: exit 1 with a message" grep -q "does not take --draft" "$tmp/draft.err"
exit $fail
