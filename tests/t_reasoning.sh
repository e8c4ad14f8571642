#!/usr/bin/env bash
# tests/t_reasoning.sh — --reasoning show|hide|off.
#   env: SHARED (../shared), QUILL (the quill binary). Run from the repo root; exit 0 = pass.
# No model here thinks on its own, so a grammar makes the small model write
# "<think>…</think>answer." (the split works on any generated text), and a
# prompt that ends inside <think> starts the generation in the reasoning, as
# reasoning models' templates do. Checks: stdout gets only the answer (hide,
# the default) or everything (off); show puts the reasoning on stderr; a
# reasoning never closed within -n is reported on stderr and in the stats;
# batch records carry "reasoning" apart from "text"; a chat keeps the
# reasoning out of the answer's content and gives it to the template as
# reasoning_content (tests/chat_reasoning_check.py); off asks the templates
# not to think.
set -u
. "$(dirname "$0")/lib.sh"
M=$SHARED/models/gguf/stories260K.gguf
printf 'root ::= "<think>" [a-z ]{1,12} "</think>" [A-Za-z ]{1,12} "."\n' >"$tmp/r.gbnf"
run() { "$QUILL" -m "$M" -n 60 --temp 0 --grammar "$tmp/r.gbnf" "$@" "Once upon a time" >"$tmp/out" 2>"$tmp/err"; }

run --reasoning off
full=$(cat "$tmp/out")
check "off: the whole text on stdout" $PY -c "import re,sys; sys.exit(not re.fullmatch(r'<think>[a-z ]+</think>[A-Za-z ]+\.', sys.argv[1]))" "$full"
think=${full#<think>}; think=${think%%</think>*}; answer=${full#*</think>}
run
check "hide (default): stdout is the answer alone" [ "$(cat "$tmp/out")" = "$answer" ]
check "hide: the reasoning is not on stderr" bash -c "! grep -qF -- '$think' '$tmp/err'"
run --reasoning show
check "show: stdout is the answer alone" [ "$(cat "$tmp/out")" = "$answer" ]
check "show: the reasoning is on stderr" grep -qF -- "$think" "$tmp/err"

printf 'Let me think. <think>\n' >"$tmp/p.txt"
"$QUILL" -m "$M" -n 8 --temp 0 --stats-json "$tmp/s.json" -f "$tmp/p.txt" >"$tmp/out" 2>"$tmp/err"
check "unclosed: nothing on stdout" [ ! -s "$tmp/out" ]
check "unclosed: reported on stderr" grep -q "reasoning was not closed within 8 tokens" "$tmp/err"
check "unclosed: in the stats" $PY -c "
import json; s = json.load(open('$tmp/s.json')); assert s['reasoning_closed'] is False and s['reasoning_tokens'] == 8, s"
"$QUILL" -q -m "$M" -n 8 --temp 0 --output-format json -f "$tmp/p.txt" >"$tmp/j"
check "unclosed: json output has the reasoning apart" $PY -c "
import json; o = json.load(open('$tmp/j')); assert o['text'] == '' and o['reasoning'] and o['reasoning_closed'] is False, o"

G=$(sed 's/"/\\"/g' "$tmp/r.gbnf")
printf '{"id": 1, "prompt": "Once upon a time", "temp": 0, "grammar": "%s"}\n' "$G" >"$tmp/in.jsonl"
"$QUILL" batch -q -m "$M" -n 60 -i "$tmp/in.jsonl" >"$tmp/b.jsonl"
check "batch: reasoning apart from text" $PY -c "
import json, sys; r = json.loads(open('$tmp/b.jsonl').readline())
assert r['text'] == sys.argv[1] and r['reasoning'] == sys.argv[2] and r['reasoning_closed'], r" "$answer" "$think"

printf 'Hi\nAgain\n' | "$QUILL" -m "$M" -i -n 60 --temp 0 --grammar "$tmp/r.gbnf" >"$tmp/out" 2>"$tmp/err"
check "chat: stdout has the answers alone" bash -c "! grep -q think '$tmp/out' && [ \$(wc -l <'$tmp/out') = 2 ]"
check "chat: the reasoning is shown on stderr" bash -c "[ \$(grep -v '^quill:' '$tmp/err' | grep -c '[a-z]') = 2 ]"
# the second turn reuses the first's 17 prompt tokens plus only what the answer adds: no reasoning in the history
check "chat: the reasoning stays out of the conversation" bash -c "grep -q 'prompt 26 tok (17 reused)' '$tmp/err'"
# real templates: the history is jinja2's rendering of the answers with their reasoning_content
check "chat: Qwen3, GLM-4.7 and Qwen3-Coder see the turns as jinja2 renders them (chat_reasoning_check.py)" \
    $PY tests/chat_reasoning_check.py "$QUILL" "$SHARED/models/gguf/synth-qwen3-Q4_K_M.gguf"

echo '[{"role": "user", "content": "hi"}]' >"$tmp/c.json"
"$QUILL" template --chat-template "$SHARED/templates/Qwen-Qwen3-0.6B.jinja" --reasoning off "$tmp/c.json" >"$tmp/q"
check "off: Qwen3's template closes the reasoning at once (enable_thinking=false)" bash -c "tail -c 20 '$tmp/q' | grep -q '</think>'"
"$QUILL" template --chat-template "$SHARED/templates/openai-gpt-oss-120b.jinja" --reasoning off "$tmp/c.json" >"$tmp/g"
check "off: gpt-oss's template gets reasoning_effort low" grep -q "Reasoning: low" "$tmp/g"
exit $fail
