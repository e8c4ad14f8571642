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
check "a schema that is not JSON" error_is "not JSON" --json-schema '{"type": '
check "two grammars" error_is "two grammars" --json --grammar "$SHARED/grammars/json.gbnf"
exit $fail
