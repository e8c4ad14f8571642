#!/usr/bin/env bash
# tests/t_logprobs.sh — --logprobs and --output-format.
#   env: SHARED (../shared), QUILL (the quill binary). Run from the repo root; exit 0 = pass.
# The log-probabilities against models/npllama.py's float64 forward pass
# (tests/logprobs_check.py); the json and jsonl shapes; the text in them is
# what the text format prints; batch records carry "logprobs"; with --draft and
# --lookup they are the plain run's.
set -u
. "$(dirname "$0")/lib.sh"
M=$SHARED/models/gguf/stories260K.gguf
check "log-probabilities match the float64 reference" $PY tests/logprobs_check.py "$QUILL" "$M"

"$QUILL" -q -m "$M" -n 20 --temp 0 "Once upon a time" >"$tmp/text"
"$QUILL" -q -m "$M" -n 20 --temp 0 --output-format json "Once upon a time" >"$tmp/json"
"$QUILL" -q -m "$M" -n 20 --temp 0 --output-format jsonl --logprobs 2 "Once upon a time" >"$tmp/jsonl"
check "json: one object, the text as printed, the tokens" $PY -c "
import json
o = json.load(open('$tmp/json'))
assert o['text'] == open('$tmp/text').read(), o
assert o['completion_tokens'] == len(o['tokens']) == 20 and o['finish_reason'] == 'length', o
assert bytes(b for t in o['tokens'] for b in t['bytes']).decode() == o['text']"
check "jsonl: one object per token with 2 alternatives, then the stats object" $PY -c "
import json
lines = [json.loads(l) for l in open('$tmp/jsonl')]
toks, last = lines[:-1], lines[-1]
assert len(toks) == 20 and all(len(t['top_logprobs']) == 2 and t['logprob'] <= 0 for t in toks), toks
assert last['text'] == open('$tmp/text').read() and last['completion_tokens'] == 20, last
assert all(t['top_logprobs'][0]['id'] == t['id'] for t in toks)  # greedy: the token is the top one"
check "--logprobs alone implies json" $PY -c "
import json, subprocess
o = json.loads(subprocess.run(['$QUILL', '-q', '-m', '$M', '-n', '3', '--logprobs', '0', 'Hi'], capture_output=True).stdout)
assert all(c['top_logprobs'] == [] for c in o['logprobs']['content']), o"
check "--logprobs 21 is refused" bash -c "! '$QUILL' -m '$M' --logprobs 21 hi 2>/dev/null"

# --draft / --lookup: each token's log-probabilities come from the verification
# pass's row for it, which is what a one-token pass computes: the greedy output
# (text, tokens, log-probabilities and alternatives) must be the plain run's,
# byte for byte on one backend; the stats show drafts both accepted and rejected.
G=$SHARED/models/gguf
R="Tom had a red ball. Tom had a red ball. Tom had a red ball. Tom had a"
# spec_same NAME "SPEC OPTIONS" QUILL ARGS...
spec_same() {
    local name=$1 spec=$2; shift 2
    "$QUILL" -q -t 1 -m "$M" --temp 0 --logprobs 5 "$@" >"$tmp/lp_plain.json" 2>"$tmp/err" ||
        { check "$name: plain run" false; cat "$tmp/err"; return; }
    # shellcheck disable=SC2086  # $spec is a list of options
    "$QUILL" -q -t 1 -m "$M" --temp 0 --logprobs 5 $spec --stats-json "$tmp/lp_s.json" "$@" >"$tmp/lp_spec.json" \
        2>"$tmp/err" || { check "$name: speculative run" false; cat "$tmp/err"; return; }
    check "$name: the plain run's tokens and log-probabilities" $PY -c "
import json
a, b = ([json.loads(l) for l in open(f)] for f in ('$tmp/lp_plain.json', '$tmp/lp_spec.json'))
for o in a[-1], b[-1]: del o['ttft_ms'], o['tpot_ms']  # timings
toks = a[-1]['logprobs']['content'] if 'logprobs' in a[-1] else a[:-1]
assert len(toks) > 20 and all(len(t['top_logprobs']) == 5 for t in toks), a
diff = [(x, y) for x, y in zip(toks, b[-1]['logprobs']['content'] if 'logprobs' in b[-1] else b[:-1]) if x != y]
assert a == b, diff[:1] or (a[-1], b[-1])
d = json.load(open('$tmp/lp_s.json'))
assert 0 < d['draft_accepted'] < d['draft_tokens'], d"
}
spec_same "--draft" "--draft $G/stories260K-Q4_0.gguf" -n 100 "Once upon a time"
spec_same "--draft, fixed K 12, repeat penalty" "--draft $G/stories260K-Q4_0.gguf --draft-max 12 --draft-fixed" \
    -n 100 --repeat-penalty 1.3 --repeat-last-n 16 "Lily wanted to"
spec_same "--lookup" "--lookup" -n 100 "$R"
spec_same "--lookup, jsonl" "--lookup" --output-format jsonl -n 60 "$R"
printf '%s\n' 'root ::= ("Tom" | " had" | " a" | " red" | " ball" | "." | " the" | " dog")+' >"$tmp/g.gbnf"
spec_same "--draft with a grammar" "--draft $G/stories260K-Q4_0.gguf" -n 60 --grammar "$tmp/g.gbnf" "$R"
check "sampling with --draft: log-probabilities match the float64 reference" \
    $PY tests/logprobs_check.py "$QUILL" "$M" "$G/stories260K-Q4_0.gguf"

printf '%s\n' '{"id": 1, "prompt": "Once upon a time", "temp": 0, "n": 20, "logprobs": 2}' \
    '{"id": 2, "prompt": "Once upon a time", "temp": 0, "n": 20}' >"$tmp/in.jsonl"
"$QUILL" batch -q -m "$M" -i "$tmp/in.jsonl" >"$tmp/out.jsonl"
check "batch: a record's logprobs equal the single run's" $PY -c "
import json
recs = {r['id']: r for r in map(json.loads, open('$tmp/out.jsonl'))}
single = [json.loads(l) for l in open('$tmp/jsonl')][:-1]
got = recs[1]['logprobs']['content']
assert [t['id'] for t in got] == [t['id'] for t in single]
assert all(abs(a['logprob'] - b['logprob']) < 1e-5 for a, b in zip(got, single)), (got, single)
assert 'logprobs' not in recs[2]"
exit $fail
