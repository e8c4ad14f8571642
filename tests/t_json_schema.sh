#!/usr/bin/env bash
# tests/t_json_schema.sh — constrained decoding from the command line.
#   env: SHARED (../shared), QUILL (the quill binary). Run from the repo root; exit 0 = pass.
# Every output of --json-schema over many schemas, prompts and seeds, greedy
# and sampled, on a 512- and a 32000-token vocabulary, validates under
# python3-jsonschema, and the shipped GBNF grammars' outputs are in their
# languages (tests/schema_check.py); a grammar that forces the end gives
# finish_reason stop, -n first gives length and a notice; bad grammars and
# schemas are one clear line.
set -u
. "$(dirname "$0")/lib.sh"
M=$SHARED/models/gguf/stories260K.gguf
$PY -c 'import jsonschema' || { echo "t_json_schema: python3-jsonschema is missing (./setup.sh --deps)" >&2; exit 1; }
check "schemas validate, grammars hold (schema_check.py)" $PY tests/schema_check.py "$QUILL" "$SHARED"

stat() { $PY -c "import json,sys; print(json.load(open('$tmp/s.json'))[sys.argv[1]])" "$1"; }

out=$("$QUILL" -m "$M" -n 50 --temp 0 --stats-json "$tmp/s.json" --json-schema '{"enum": ["yes", "no"]}' hi 2>/dev/null)
check "enum output is one of the values" $PY -c "import sys; sys.exit(sys.argv[1] not in ('\"yes\"', '\"no\"'))" "$out"
check "the grammar's forced end is finish_reason stop" [ "$(stat finish_reason)" = stop ]
check "grammar_complete true" [ "$(stat grammar_complete)" = True ]
"$QUILL" -m "$M" -n 3 --temp 0 --stats-json "$tmp/s.json" --json-schema '{"type": "string", "minLength": 50}' hi \
    >/dev/null 2>"$tmp/err"
check "cut by -n: finish_reason length" [ "$(stat finish_reason)" = length ]
check "cut by -n: grammar_complete false" [ "$(stat grammar_complete)" = False ]
check "cut by -n: a notice that the output is a prefix" grep -q "before the grammar was complete" "$tmp/err"

# speculative decoding: greedy constrained output is byte-identical with a draft
# model or prompt lookup; sampled output with a draft still validates
S='{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},"tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3}},"required":["name","age","tags"]}'
G=$SHARED/models/gguf
for p in "Once upon a time" "Lily and Ben"; do
    for extra in "" "--repeat-penalty 1.3"; do
        # shellcheck disable=SC2086  # $extra is a list of options
        "$QUILL" -q -m "$G/stories260K.gguf" -t 1 -n 200 --temp 0 $extra --json-schema "$S" "$p" >"$tmp/plain" 2>/dev/null
        for spec in "--draft $G/stories260K-Q4_0.gguf" "--lookup"; do
            # shellcheck disable=SC2086
            "$QUILL" -q -m "$G/stories260K.gguf" -t 1 -n 200 --temp 0 $extra $spec --json-schema "$S" "$p" >"$tmp/spec" 2>/dev/null
            check "greedy + grammar, $spec $extra, '$p': identical" cmp -s "$tmp/plain" "$tmp/spec"
        done
    done
    for seed in 1 2 3; do
        "$QUILL" -q -m "$G/stories260K.gguf" -t 1 -n 300 --temp 0.9 --seed $seed --draft "$G/stories260K-Q8_0.gguf" \
            --json-schema "$S" "$p" >"$tmp/spec" 2>/dev/null
        check "sampled + grammar + draft, seed $seed: validates" $PY -c "
import json, jsonschema, sys; jsonschema.validate(json.load(open('$tmp/spec')), json.loads(sys.argv[1]))" "$S"
    done
done

# quill batch: per-record grammars; greedy output equals the single runs'
{
    echo '{"id": "a", "prompt": "Once upon a time", "temp": 0, "json_schema": '"$S"'}'
    echo '{"id": "b", "prompt": "Hi", "temp": 0, "grammar": "root ::= (\"yes\" | \"no\") \".\""}'
    echo '{"id": "c", "prompt": "Lily and Ben", "temp": 0}'
} >"$tmp/in.jsonl"
"$QUILL" batch -q -m "$M" -n 200 -i "$tmp/in.jsonl" >"$tmp/out.jsonl" 2>/dev/null
"$QUILL" -q -m "$M" -n 200 --temp 0 --json-schema "$S" "Once upon a time" >"$tmp/a" 2>/dev/null
printf 'root ::= ("yes" | "no") "."\n' >"$tmp/b.gbnf"
"$QUILL" -q -m "$M" -n 200 --temp 0 --grammar "$tmp/b.gbnf" "Hi" >"$tmp/b" 2>/dev/null
check "batch records with grammars match the single runs" $PY -c "
import json
recs = {r['id']: r for r in map(json.loads, open('$tmp/out.jsonl'))}
assert recs['a']['text'] == open('$tmp/a').read() and recs['a']['finish_reason'] == 'stop', recs['a']
assert recs['b']['text'] == open('$tmp/b').read() and recs['b']['grammar_complete'], recs['b']
assert 'grammar_complete' not in recs['c']"
echo '{"prompt": "x", "grammar": "root ::= missing"}' | "$QUILL" batch -q -m "$M" -n 5 >"$tmp/out.jsonl" 2>/dev/null
check "a bad record grammar is an error record" grep -q "'missing' is used but not defined" "$tmp/out.jsonl"

# errors: one line naming the problem, exit 1, nothing on stdout
error_is() {  # want, args...
    local want=$1; shift
    "$QUILL" -m "$M" -n 5 "$@" hi >"$tmp/out" 2>"$tmp/err" && return 1
    [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q -- "$want" "$tmp/err" && [ ! -s "$tmp/out" ]
}
printf 'root ::= expr\nexpr ::= expr "+" [0-9] | [0-9]\n' >"$tmp/left.gbnf"
check "left recursion is an error" error_is "left-recursive" --grammar "$tmp/left.gbnf"
printf 'root ::= "a" undefined-rule\n' >"$tmp/undef.gbnf"
check "an undefined rule is an error" error_is "undefined-rule' is used but not defined" --grammar "$tmp/undef.gbnf"
check "a missing grammar file" error_is "cannot open" --grammar "$tmp/missing.gbnf"
check "an unsupported regex" error_is "pattern: backreferences" --json-schema '{"type": "string", "pattern": "^(a)\\1$"}'
check "allOf is refused" error_is "allOf" --json-schema '{"allOf": [{"type": "string"}]}'
check "oneOf integer/number is refused" error_is "oneOf with overlapping branches is not supported" \
    --json-schema '{"oneOf": [{"type": "integer"}, {"type": "number"}]}'
check "oneOf of objects that may both be {} is refused" error_is "oneOf with overlapping branches" \
    --json-schema '{"oneOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "null"}}}]}'
check "a nested oneOf with a shared enum value is refused" error_is "oneOf with overlapping branches" \
    --json-schema '{"type": "array", "items": {"oneOf": [{"enum": ["x", 1]}, {"enum": [1.0, "y"]}]}}'
check "anyOf beside oneOf is refused" error_is "anyOf and oneOf in one schema" \
    --json-schema '{"anyOf": [{"type": "string"}], "oneOf": [{"type": "string"}]}'
check "a schema that is not JSON" error_is "not JSON" --json-schema '{"type": '
check "two grammars" error_is "two grammars" --json --grammar "$SHARED/grammars/json.gbnf"
exit $fail
