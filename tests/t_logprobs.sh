#!/usr/bin/env bash
# tests/t_logprobs.sh — --logprobs and --output-format.
#   env: SHARED (../shared), QUILL (the quill binary). Run from the repo root; exit 0 = pass.
# The log-probabilities against models/npllama.py's float64 forward pass
# (tests/logprobs_check.py); the json and jsonl shapes; the text in them is
# what the text format prints; batch records carry "logprobs".
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
