#!/usr/bin/env bash
# Chat templates. tests/template_ref.py: quill's Jinja engine against jinja2 (set up as
# transformers sets it up) on the 72 real templates of $SHARED/templates, small feature
# templates and the built-in formats, each over the conversations of
# tests/template_convs.json. Then `quill template` (conversation JSON in, the rendering out,
# byte for byte against jinja2 for the templates in the vocabulary GGUFs), its options and
# errors, and a chat with a model whose GGUF carries a real template (Qwen3's): the prompt
# is the template's rendering, turns reuse the KV prefix, a template error skips the turn.
set -u
. tests/lib.sh
"$PY" -c 'import jinja2' 2>/dev/null || { echo "FAIL python3-jinja2 is not installed (.ci/run installs it)"; exit 1; }
export SOURCE_DATE_EPOCH=1767225600 TZ=UTC   # strftime_now: the same date on both sides
"$PY" tests/template_ref.py "$BUILD" "$SHARED" >"$tmp/ref" 2>&1
check "template_ref.py: every template and feature as jinja2 renders it" test $? = 0
grep -v '^ok' "$tmp/ref"

# ---- quill template ------------------------------------------------------------------
# jinja2's rendering of a GGUF's own template (its BOS/EOS pieces as bos_token/eos_token)
ref() {  # GGUF CONV.json GEN(1/0)
    "$PY" - "$@" <<'EOF'
import json, os, sys
sys.path.insert(0, "tests"); sys.path.insert(0, "models")
import template_ref
from gguf_reader import GGUFReader
r = GGUFReader(sys.argv[1]); toks = r.kv["tokenizer.ggml.tokens"]
conv = json.load(open(sys.argv[2]))
msgs, tools = (conv, None) if isinstance(conv, list) else (conv["messages"], conv.get("tools"))
tpl = template_ref.make_env().from_string(r.kv["tokenizer.chat_template"])
sys.stdout.write(tpl.render(messages=msgs, tools=tools, documents=None, add_generation_prompt=sys.argv[3] == "1",
                            bos_token=toks[r.kv["tokenizer.ggml.bos_token_id"]],
                            eos_token=toks[r.kv["tokenizer.ggml.eos_token_id"]]))
EOF
}
"$PY" -c 'import json; c = json.load(open("tests/template_convs.json")); json.dump(c[1], open("'"$tmp"'/conv.json", "w")); json.dump(c[1]["messages"], open("'"$tmp"'/list.json", "w"))'
for v in phi-3 qwen2; do
    g="$SHARED/vocab/ggml-vocab-$v.gguf"
    "$QUILL" template -m "$g" "$tmp/conv.json" >"$tmp/q1"
    ref "$g" "$tmp/conv.json" 1 >"$tmp/j1"
    check "quill template -m $v: jinja2's rendering, byte for byte" cmp -s "$tmp/q1" "$tmp/j1"
    "$QUILL" template -m "$g" --no-generation-prompt <"$tmp/list.json" >"$tmp/q0"
    ref "$g" "$tmp/list.json" 0 >"$tmp/j0"
    check "quill template -m $v --no-generation-prompt, a bare list on stdin" cmp -s "$tmp/q0" "$tmp/j0"
done
Q3="$SHARED/templates/Qwen-Qwen3-0.6B.jinja"
"$QUILL" template --chat-template "$Q3" "$tmp/conv.json" >"$tmp/on"
"$QUILL" template --chat-template "$Q3" --think off "$tmp/conv.json" >"$tmp/off"
"$QUILL" template --chat-template "$Q3" --var enable_thinking=false "$tmp/conv.json" >"$tmp/var"
check "--think off: Qwen3's empty thinking block" bash -c "! grep -q '<think>' '$tmp/on' && grep -q '<think>' '$tmp/off'"
check "--think off is --var enable_thinking=false" cmp -s "$tmp/off" "$tmp/var"
"$QUILL" template --chat-template "$SHARED/templates/openai-gpt-oss-120b.jinja" --think high "$tmp/conv.json" >"$tmp/oss"
check "--think high: gpt-oss's reasoning effort" grep -q 'Reasoning: high' "$tmp/oss"
check "strftime_now uses SOURCE_DATE_EPOCH" grep -q '2026-01-01' "$tmp/oss"
"$QUILL" template --chat-template chatml <"$tmp/list.json" >"$tmp/chatml"
check "--chat-template chatml" test "$(head -n 2 "$tmp/chatml")" = "<|im_start|>system
You are a terse assistant.<|im_end|>"
tpl_err() {  # expected-message args...: exit 1, one line on stderr with the message, nothing on stdout
    local want=$1; shift
    "$QUILL" template "$@" >"$tmp/o" 2>"$tmp/e"
    test $? = 1 -a ! -s "$tmp/o" -a "$(wc -l <"$tmp/e")" = 1 && grep -q -- "$want" "$tmp/e"
}
check "a template's raise_exception: exit 1, its message and line" \
    tpl_err "line 1: System role not supported" --chat-template "$SHARED/templates/google-gemma-2-2b-it.jinja" "$tmp/conv.json"
echo '{"messages": [' >"$tmp/bad.json"
check "conversation not JSON: exit 1" tpl_err "not JSON" --chat-template chatml "$tmp/bad.json"
echo '{"msgs": []}' >"$tmp/bad.json"
check "conversation without messages: exit 1" tpl_err '"messages"' --chat-template chatml "$tmp/bad.json"
check "no model and no template: exit 1" tpl_err "usage" "$tmp/conv.json"
check "unknown template name: exit 1" tpl_err "unknown chat template 'vicuna'" --chat-template vicuna "$tmp/conv.json"
printf '{%% for x in y %%}\n{{ x | nosuch }}{%% endfor %%}' >"$tmp/bad.jinja"
check "a template filter quill lacks: exit 1, named with its line" \
    tpl_err "line 2: No filter named 'nosuch'" --chat-template "$tmp/bad.jinja" --var 'y=[1]' "$tmp/conv.json"
printf '{%% if x %%}\n{%% include "a" %%}{%% endif %%}' >"$tmp/bad.jinja"
check "an unsupported tag: exit 1, named with its line" \
    tpl_err "line 2: unsupported tag 'include'" --chat-template "$tmp/bad.jinja" "$tmp/conv.json"
check "--var without JSON: exit 1" tpl_err "not JSON" --chat-template chatml --var 'x=not json' "$tmp/conv.json"
"$QUILL" -m "$SHARED/models/gguf/stories260K.gguf" --var x=1 "Once" >/dev/null 2>"$tmp/e"
check "--var with a plain prompt: exit 1" bash -c "test $? = 1 && grep -q -- '--var' '$tmp/e'"

# ---- a chat in the model's own template ----------------------------------------------------
M="$tmp/qwen3-format.gguf"
"$PY" tests/set_template.py "$SHARED/models/gguf/stories260K.gguf" "$M" "$Q3"
chat() { printf '%b' "$1" | "$QUILL" -m "$M" -i --temp 0 -n 6 "${@:2}" >"$tmp/out" 2>"$tmp/err"; echo $? >"$tmp/rc"; }
turn() { sed -n 's/.*prompt \([0-9]*\) tok (\([0-9]*\) reused).*/\1 \2/p' "$tmp/err" | sed -n "${1}p"; }
ntok() { "$QUILL" tokenize -m "$M" --ids --special -f "$1" | wc -w; }  # tokens of a file (with BOS)
conv() {  # FILE ROLE CONTENT...: the chat so far as quill template renders it, into FILE
    local f=$1; shift
    "$PY" -c 'import json, sys; a = sys.argv[1:]; print(json.dumps([{"role": a[i], "content": a[i + 1]} for i in range(0, len(a), 2)]))' "$@" |
        "$QUILL" template -m "$M" >"$f"
}
chat 'Hi\nMore\n'
check "chat, model's template: exit 0, no warning" bash -c "test \$(cat $tmp/rc) = 0 && ! grep -q warning '$tmp/err'"
a1=$(sed -n 1p "$tmp/out")
conv "$tmp/t1" user Hi
conv "$tmp/t2" user Hi assistant "$a1" user More
check "turn 1's prompt is the template's rendering" test "$(turn 1)" = "$(ntok "$tmp/t1") 0"
read -r p2 r2 <<<"$(turn 2)"
check "turn 2: prefilled + reused = the rendered conversation" test $((p2 + r2)) = "$(ntok "$tmp/t2")"
check "turn 2 reuses turn 1's prompt" test "$r2" -ge "$(ntok "$tmp/t1")"
"$QUILL" -m "$M" --temp 0 -n 6 -q --special -f "$tmp/t2" >"$tmp/oneshot" 2>/dev/null
check "turn 2's answer (KV reused) = a one-shot run of the rendered text" test "$(cat "$tmp/oneshot")" = "$(sed -n 2p "$tmp/out")"
"$PY" tests/set_template.py "$SHARED/models/gguf/stories260K.gguf" "$tmp/gemma2.gguf" "$SHARED/templates/google-gemma-2-2b-it.jinja"
printf 'Hi\n/system Be kind.\nHello\n/system\nHello\n' | "$QUILL" -m "$tmp/gemma2.gguf" -i --temp 0 -n 4 >"$tmp/out" 2>"$tmp/err"
check "a template's refusal skips the turn and the chat goes on" \
    bash -c "test $? = 0 && grep -q 'System role not supported' '$tmp/err' && test \$(wc -l <'$tmp/out') = 2"
exit $fail
