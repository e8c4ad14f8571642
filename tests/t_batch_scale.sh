#!/usr/bin/env bash
# quill batch past one process: OpenAI Batch requests in and out, --shard I/N (and a
# Slurm array's variables) splitting a file by the FNV-1a 64 hash of each custom_id,
# -o FILE --resume after SIGKILL and SIGTERM, duplicate ids, per-line errors.
# The main check: 3 shards run as separate processes over one file, one killed with
# SIGKILL mid-run and resumed; their outputs concatenated hold every request exactly
# once, each equal to `quill` run alone on the same prompt (greedy).
set -u
. "$(dirname "$0")/lib.sh"
M="$SHARED/models/gguf/stories260K.gguf"
C="$PY tests/batch_check.py"
N=45
Q=("$QUILL" batch -m "$M" -c 256 --temp 0 -q)  # run in the background as it is: $! is quill's pid
q() { "${Q[@]}" "$@"; }
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

$C write-openai "$tmp/in.jsonl" $N
$C alone-openai "$QUILL" "$M" "$tmp/in.jsonl" "$tmp/want.jsonl"

# ---- 3 shards at once; shard 1 (one sequence at a time, one thread: slow) killed mid-run
"${Q[@]}" --shard 0/3 -i "$tmp/in.jsonl" -o "$tmp/out0.jsonl" & p0=$!
"${Q[@]}" --shard 2/3 -i "$tmp/in.jsonl" -o "$tmp/out2.jsonl" & p2=$!
"${Q[@]}" --shard 1/3 --parallel 1 -t 1 -i "$tmp/in.jsonl" -o "$tmp/out1.jsonl" & p1=$!
for _ in $(seq 4000); do [ "$(lines "$tmp/out1.jsonl")" -ge 3 ] && break; sleep 0.002; done
kill -KILL $p1
wait $p1; rc1=$?
wait $p0; rc0=$?
wait $p2; rc2=$?
check "shards 0 and 2: exit 0" test "$rc0$rc2" = 00
check "shard 1: killed by SIGKILL (137)" test "$rc1" = 137
killed_at=$(lines "$tmp/out1.jsonl")
# a kill can land inside a write: make sure the resume meets a torn last line
if [ -s "$tmp/out1.jsonl" ] && [ "$(tail -c 1 "$tmp/out1.jsonl" | od -An -c | tr -d ' ')" = '\n' ]; then
    size=$(stat -c %s "$tmp/out1.jsonl"); last=$(tail -n 1 "$tmp/out1.jsonl" | wc -c)
    truncate -s $((size - last / 2)) "$tmp/out1.jsonl"
fi
whole=$(lines "$tmp/out1.jsonl")
q --shard 1/3 --resume -i "$tmp/in.jsonl" -o "$tmp/out1.jsonl" --stats-json "$tmp/st1.json" 2>"$tmp/resume.err"
check "shard 1 resumed: exit 0" test $? = 0
total1=$(lines "$tmp/out1.jsonl")
resumed=$($PY -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["resumed"], str(s["torn"]).lower(), s["sequences"])' "$tmp/st1.json")
echo "shard sizes: $(lines "$tmp/out0.jsonl") $total1 $(lines "$tmp/out2.jsonl"); shard 1 killed after $killed_at lines" \
     "($whole whole after the tear), resume: resumed/torn/ran = $resumed"
check "shard 1 was killed mid-run (some records, not all)" test "$whole" -ge 1 -a "$whole" -lt "$total1"
check "resume kept the $whole whole lines, cut the torn one and ran the rest" \
    test "$resumed" = "$whole true $((total1 - whole))"
cat "$tmp/out0.jsonl" "$tmp/out1.jsonl" "$tmp/out2.jsonl" >"$tmp/all.jsonl"
check "3 shards, one killed and resumed: each of the $N requests exactly once, each as quill alone" \
    $C same-openai "$tmp/want.jsonl" "$tmp/all.jsonl"
shard_ok() {  # every custom_id in shard file $1 hashes (FNV-1a 64) to shard $2 of 3
    $PY - "$1" "$2" <<'EOF'
import json, sys
sys.path.insert(0, "tests")
from batch_check import fnv1a64
bad = [r["custom_id"] for r in map(json.loads, open(sys.argv[1])) if fnv1a64(r["custom_id"].encode()) % 3 != int(sys.argv[2])]
assert not bad, bad
EOF
}
for s in 0 1 2; do check "shard $s: every custom_id's FNV-1a 64 mod 3 is $s" shard_ok "$tmp/out$s.jsonl" $s; done

# ---- the input's order does not move a record to another shard
$PY -c 'import random,sys; l=open(sys.argv[1]).readlines(); random.Random(7).shuffle(l); open(sys.argv[2],"w").writelines(l)' \
    "$tmp/in.jsonl" "$tmp/shuf.jsonl"
ids() { $PY -c 'import json,sys; print(sorted(json.loads(l)["custom_id"] for l in open(sys.argv[1])))' "$1"; }
q --shard 2/3 -n 1 -i "$tmp/shuf.jsonl" -o "$tmp/shuf2.jsonl"
check "a shuffled input: shard 2 holds the same requests" test "$(ids "$tmp/shuf2.jsonl")" = "$(ids "$tmp/out2.jsonl")"

# ---- a Slurm array picks the shard: task ids 1..3 (TASK_MIN 1), this one 3 is shard 2
SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=3 SLURM_ARRAY_TASK_COUNT=3 \
    "$QUILL" batch -m "$M" -c 256 --temp 0 -i "$tmp/in.jsonl" -o "$tmp/slurm.jsonl" 2>"$tmp/slurm.err"
check "Slurm array task 3 of 1..3: exit 0" test $? = 0
check "Slurm array: says which shard on stderr" grep -q "shard 2/3 from the Slurm array" "$tmp/slurm.err"
check "Slurm array: the same requests as --shard 2/3" test "$(ids "$tmp/slurm.jsonl")" = "$(ids "$tmp/out2.jsonl")"
SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=9 SLURM_ARRAY_TASK_COUNT=3 \
    "$QUILL" batch -m "$M" -i "$tmp/in.jsonl" -o "$tmp/slurm2.jsonl" 2>"$tmp/slurm2.err"
check "a Slurm array that is not a range of task ids: exit 1, asks for --shard" \
    test $? = 1 -a -n "$(grep -- '--shard I/N' "$tmp/slurm2.err")"

# ---- SIGTERM: the lines written are whole, exit 143, and --resume finishes the job
"$QUILL" batch -m "$M" -c 256 --temp 0 --parallel 1 -t 1 -i "$tmp/in.jsonl" -o "$tmp/term.jsonl" 2>"$tmp/term.err" & pt=$!
for _ in $(seq 4000); do [ "$(lines "$tmp/term.jsonl")" -ge 1 ] && break; sleep 0.002; done
kill -TERM $pt; wait $pt; rct=$?
check "SIGTERM: exit 143" test "$rct" = 143
check "SIGTERM: only whole lines, ending in a newline" \
    $PY -c 'import json,sys; d=open(sys.argv[1]).read(); assert d.endswith("\n"); [json.loads(l) for l in d.splitlines()]' "$tmp/term.jsonl"
check "SIGTERM: says how to finish" grep -q -- "--resume" "$tmp/term.err"
q --resume -i "$tmp/in.jsonl" -o "$tmp/term.jsonl"
check "SIGTERM, then --resume: every request once, each as quill alone" $C same-openai "$tmp/want.jsonl" "$tmp/term.jsonl"

# ---- bad lines, duplicates, what quill cannot do: error records in OpenAI's shape (logprobs
# and a JSON response_format among them run)
{
    head -n 2 "$tmp/in.jsonl"
    echo 'not json'
    head -n 1 "$tmp/in.jsonl"    # req-0 again
    echo '{"custom_id": "lp", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "logprobs": 2}}'
    echo '{"custom_id": "rf", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}}'
    echo '{"custom_id": "emb", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}}'
    echo '{"custom_id": "n2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "n": 2}}'
    echo '{"custom_id": "tools", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "x"}], "tools": []}}'
    echo '{"id": "quill-style", "prompt": "x"}'
} >"$tmp/bad.jsonl"
q -n 4 -i "$tmp/bad.jsonl" -o "$tmp/bad.out" 2>"$tmp/bad.err"
check "bad requests: exit 1, a count on stderr" test $? = 1 -a -n "$(grep '6 of 10 input records failed' "$tmp/bad.err")"
bad_ok() {
    $PY - "$tmp/bad.out" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["custom_id"], (r["error"] or {}).get("code"), (r["error"] or {}).get("line"), r["response"]["status_code"]) for r in recs]
want = [("req-0", None, None, 200), ("req-1", None, None, 200), (None, "invalid_request", 3, 400),
        ("req-0", "duplicate_custom_id", 4, 400), ("lp", None, None, 200),
        ("rf", None, None, 200), ("emb", "invalid_request", 7, 400),
        ("n2", "unsupported_parameter", 8, 400), ("tools", "unsupported_parameter", 9, 400),
        (None, "invalid_request", 10, 400)]
assert got == want, got
assert all(r["response"]["body"] is None for r in recs if r["error"])
lp = recs[4]["response"]["body"]["choices"][0]["logprobs"]  # a completion's: parallel arrays
assert lp["tokens"] and "".join(lp["tokens"]) == recs[4]["response"]["body"]["choices"][0]["text"], lp
assert all(len(t) == 2 for t in lp["top_logprobs"]) and all(x <= 0 for x in lp["token_logprobs"]), lp
assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))], lp
assert recs[5]["response"]["body"]["choices"][0]["message"]["content"].startswith("{"), recs[5]
assert len({r["id"] for r in recs}) == len(recs)  # one id per output line
EOF
}
check "bad requests: each its error record (code, line), in order; the good ones run" bad_ok
# resumed, the duplicate's error record stays one: errors are keyed by their line
head -n 4 "$tmp/bad.out" >"$tmp/bad2.out"
q -n 4 --resume -i "$tmp/bad.jsonl" -o "$tmp/bad2.out" 2>/dev/null
check "bad requests resumed after 4 lines: the same 10 records, none twice" \
    test "$(sort "$tmp/bad2.out" | cut -c1-60 | uniq | wc -l)" = 10 -a "$(lines "$tmp/bad2.out")" = 10

# ---- quill's own records: a repeated id is an error record; --resume on stdout is refused
printf '{"id": "a", "prompt": "Once"}\n{"id": "a", "prompt": "Twice"}\n' | q -n 2 >"$tmp/dup.out" 2>/dev/null
check "quill records: a repeated id is an error record" \
    $PY -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert "tokens" in r[0] and "unique" in r[1]["error"], r' "$tmp/dup.out"
q --resume -i "$tmp/in.jsonl" 2>"$tmp/r.err"
check "--resume without -o FILE: exit 1 with a message" grep -q "needs -o FILE" "$tmp/r.err"
printf 'garbage\n{"id": 1}\n' >"$tmp/notours.jsonl"
q --resume -i "$tmp/in.jsonl" -o "$tmp/notours.jsonl" 2>"$tmp/r2.err"
check "--resume on a file that is not batch output: exit 1 naming the line, the file untouched" \
    test -n "$(grep 'notours.jsonl: line 1' "$tmp/r2.err")" -a "$(lines "$tmp/notours.jsonl")" = 2
exit $fail
