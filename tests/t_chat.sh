#!/usr/bin/env bash
# The chat REPL. Piped (-i with stdin from a file): turn reuse against token
# counts from `quill tokenize`, the KV-reusing answer against a one-shot run of
# the same text, multi-line input, --system and /system, the context-full
# policies, /save and /load, commands, errors. Through a pseudo-terminal
# (tests/pty_chat.py): a three-turn chat, Ctrl-C, history across runs.
set -u
. tests/lib.sh
M="$SHARED/models/gguf/stories260K.gguf"   # no chat template: the plain format
# chat MESSAGES ARGS...: a piped chat; stdout in $tmp/out, stderr in $tmp/err, status in $tmp/rc
chat() { local in=$1; shift; printf '%b' "$in" | "$QUILL" -m "$M" -i --temp 0 "$@" >"$tmp/out" 2>"$tmp/err"; echo $? >"$tmp/rc"; }
rc() { [ "$(cat "$tmp/rc")" = "$1" ]; }
has() { grep -q -- "$1" "$tmp/err"; }
# tokens of a text, with BOS (quill drops one trailing newline from a prompt: give it one to drop)
ntok() { "$QUILL" tokenize -m "$M" --ids --special "$1" | wc -w; }  # (an argument is taken as it is)
answer() { sed -n "${1}p" "$tmp/out"; }
# turn N's "prompt P tok (R reused)": prints "P R"
turn() { sed -n 's/.*prompt \([0-9]*\) tok (\([0-9]*\) reused).*/\1 \2/p' "$tmp/err" | sed -n "${1}p"; }
sum() { local p r; read -r p r <<<"$(turn "$1")"; echo $((p + r)); }

chat 'Hi\nTell me a story\nWhat happened next?\n' -n 12
check "three turns: exit 0" rc 0
check "three answers on stdout, one a line" test "$(wc -l <"$tmp/out")" = 3
check "stdout has no prompts, notices or stats" bash -c "! grep -q 'quill:\|User:' '$tmp/out'"
check "the plain format is announced with a warning" has "warning: the model has no chat template"
a1=$(answer 1); a2=$(answer 2); a3=$(answer 3)
t1="User: Hi
Assistant:"
t2="$t1$a1
User: Tell me a story
Assistant:"
t3="$t2$a2
User: What happened next?
Assistant:"
check "turn 1 prefills its whole prompt" test "$(turn 1)" = "$(ntok "$t1") 0"
check "turn 2: prefilled + reused = the conversation" test "$(sum 2)" = "$(ntok "$t2")"
check "turn 3: prefilled + reused = the conversation" test "$(sum 3)" = "$(ntok "$t3")"
read -r p2 r2 <<<"$(turn 2)"
check "turn 2 reuses all of turn 1's prompt and prefills only its own tokens" \
    test "$r2" -ge "$(ntok "$t1")" -a "$p2" -le $(($(ntok "$t2") - $(ntok "$t1") - 12 + 2))
"$QUILL" -m "$M" --temp 0 -n 12 -q "$t3" >"$tmp/oneshot"
check "turn 3's answer (KV reused) = a one-shot run of the same text" test "$(cat "$tmp/oneshot")" = "$a3"

chat '"""\nline one\nline two\n"""\nfirst \\\nsecond\n' -n 8
b1=$(answer 1)
check "a \"\"\" block is one message" test "$(turn 1)" = "$(ntok "User: line one
line two
Assistant:") 0"
check "a trailing backslash continues the message" test "$(sum 2)" = "$(ntok "User: line one
line two
Assistant:$b1
User: first 
second
Assistant:")"

chat 'Hi\n/system Be kind.\nTell me a story\n' -n 8 --system "Be brief."
c1=$(answer 1)
check "--system is the first message" test "$(turn 1)" = "$(ntok "System: Be brief.
User: Hi
Assistant:") 0"
check "/system replaces it; the next turn re-reads the changed conversation" test "$(sum 2)" = "$(ntok "System: Be kind.
User: Hi
Assistant:$c1
User: Tell me a story
Assistant:")"

chat 'Hi\n' -n 4 --chat-template chatml
check "--chat-template chatml: no warning" bash -c "! grep -q warning '$tmp/err'"
check "--chat-template chatml renders ChatML" test "$(turn 1)" = "$(ntok "<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
") 0"
# each family's own template (python3-jinja2 renders the reference; transformers' settings)
render() {  # TEMPLATE: the one-message conversation "Hi" with the generation prompt
    "$PY" -c 'import datetime, jinja2, sys
e = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
sys.stdout.write(e.from_string(open(sys.argv[1]).read()).render(messages=[{"role": "user", "content": "Hi"}],
    add_generation_prompt=True, bos_token="<s>", eos_token="</s>",
    strftime_now=lambda f: datetime.datetime.now().strftime(f)))' "$1"
}
for fam in "synth-gemma3-Q4_K_M google-gemma-3-4b-it" "synth-phi3-Q8_0 microsoft-phi-4" \
    "synth-qwen3moe-Q4_K_M Qwen-Qwen3-0.6B" "synth-gptoss-MXFP4 openai-gpt-oss-120b"; do
    read -r gm tpl <<<"$fam"
    M="$SHARED/models/gguf/$gm.gguf"
    [ -f "$M" ] || { echo "skip $gm: not found"; continue; }
    chat 'Hi\n' -n 4 --chat-template "$SHARED/templates/$tpl.jinja"
    check "$gm chats with $tpl.jinja: exit 0, one answer" bash -c "[ \$(cat '$tmp/rc') = 0 ] && [ \$(wc -l <'$tmp/out') = 1 ]"
    render "$SHARED/templates/$tpl.jinja" >"$tmp/want"
    echo '[{"role": "user", "content": "Hi"}]' >"$tmp/hi.json"
    "$QUILL" template -m "$M" --chat-template "$SHARED/templates/$tpl.jinja" "$tmp/hi.json" >"$tmp/got"
    check "$gm: quill's rendering of the template (the chat's) is jinja2's, byte for byte" cmp "$tmp/want" "$tmp/got"
done
M="$SHARED/models/gguf/stories260K.gguf"

chat 'Hi\n' --chat-template vicuna
check "unknown --chat-template: exit 1" rc 1
check "unknown --chat-template: named" has "vicuna"
chat 'Hi\n' --context-full sometimes
check "bad --context-full: exit 1" rc 1
chat 'Hi\n' "a prompt"
check "-i with a prompt: exit 1" rc 1

chat 'Hi\nTell me a story\n/reset\nHi\n' -n 16 -c 48 --context-full stop
check "--context-full stop: says so and asks for /reset" has "context full.*/reset"
check "--context-full stop: the message is not answered; after /reset it is" test "$(wc -l <"$tmp/out")" = 2
check "--context-full stop: after /reset the chat starts over" test "$(turn 2)" = "$(turn 1)"
chat 'Hi\nTell me a story\n' -n 16 -c 64
check "--context-full shift (default): drops the oldest turn" has "dropped the oldest 1 exchange"
check "--context-full shift: the message is answered" test "$(wc -l <"$tmp/out")" = 2
check "--context-full shift: what is left is the new turn alone" test "$(sum 2)" = "$(ntok "User: Tell me a story
Assistant:")"

chat "Hi\n/save $tmp/conv\nTell me a story\n" -n 12
check "/save: exit 0" rc 0
check "/save writes the cache and the messages" test -s "$tmp/conv" -a -s "$tmp/conv.chat"
check "/save: the files are private" test "$(stat -c %a "$tmp/conv.chat")" = 600
cp "$tmp/out" "$tmp/saved_run"
read -r saved_p saved_r <<<"$(turn 2)"
chat "/load $tmp/conv\nTell me a story\n" -n 12
check "/load: says what it loaded" has "loaded 2 messages"
check "/load: the next turn reuses the loaded cache as the live chat did" test "$(turn 1)" = "$saved_p $saved_r"
check "/load: the answer is the live chat's" test "$(answer 1)" = "$(sed -n 2p "$tmp/saved_run")"
printf 'quill-chat 1\nuser 999\nshort\n' >"$tmp/bad.chat"; cp "$tmp/conv" "$tmp/bad"
chat "/load $tmp/bad\n/load $tmp/missing\n/bogus\n/save\nHi\n" -n 4 -q
check "bad /load, unknown command: reported, even with -q" \
    bash -c "grep -q 'not a quill chat file' '$tmp/err' && grep -q 'cannot open' '$tmp/err' && grep -q 'unknown command /bogus' '$tmp/err' && grep -q '/save needs a file name' '$tmp/err'"
check "bad commands: the chat goes on and exits 0" bash -c "[ \$(cat '$tmp/rc') = 0 ] && [ \$(wc -l <'$tmp/out') = 1 ]"

# -n 2 ends the answer between the byte tokens of a 3-byte character (the
# grammar allows only "€"): the conversation keeps it as U+FFFD (a message is
# a JSON string, UTF-8), and the next message is answered
printf 'root ::= "€€€€"\n' >"$tmp/euro.gbnf"
chat 'Hi\nGo on\n' -n 2 --grammar "$tmp/euro.gbnf"
check "an answer cut inside a character: the next turn is answered" \
    bash -c "[ \$(cat '$tmp/rc') = 0 ] && [ \$(grep -c 'generated 2 tok' '$tmp/err') = 2 ] && ! grep -q 'not UTF-8' '$tmp/err'"

chat '/stats\n/help\n//slash\n' -n 4
check "/stats and /help write to stderr" bash -c "grep -q 'turns' '$tmp/err' && grep -q '/reset' '$tmp/err'"
check "//text sends /text" test "$(turn 1)" = "$(ntok "User: /slash
Assistant:") 0"

printf 'Hi\nHi\nHi\n' | "$QUILL" -m "$M" -i --temp 0 -n 64 2>"$tmp/err" | head -c 5 >/dev/null
check "closed stdout: exit 0" test "${PIPESTATUS[1]}" = 0

for opt in "--prompt-cache $tmp/pc" "--stats-json $tmp/st" --echo; do
    chat 'Hi\n' $opt
    check "chat with $opt: exit 1, one line naming it" \
        sh -c "test \"\$(cat $tmp/rc)\" = 1 && test \"\$(wc -l <$tmp/err)\" = 1 && grep -q -- '${opt%% *}' $tmp/err"
done

"$PY" tests/pty_chat.py "$QUILL" "$SHARED" || fail=1
exit $fail
