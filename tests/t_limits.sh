#!/usr/bin/env bash
# tests/t_limits.sh — resources bounded before they are spent, and non-finite numbers.
#   env: QUILL (quill binary), SHARED (../shared). Run from the repo root; exit 0 = pass.
#
# tests/hostile_gguf.py makes valid but hostile files from stories260K: 4096 layers whose
# tensor infos all point at layer 0's data (2.6 MB; its KV cache at -c 16777216 would be
# 8 TB), +inf output norms, a NaN embedding row. Each must fail at once with one line
# naming the cause: no OOM kill, no allocation of the memory it asks for (the run is
# watched by /usr/bin/time's peak RSS), no sanitizer report (under make test-asan).
set -u
. "$(dirname "$0")/lib.sh"
M=models/stories260K.gguf
"$PY" tests/hostile_gguf.py "$M" "$tmp"

# one line "quill: ..." on stderr matching the regex, exit 1, peak RSS under 300 MB
fails_with() {  # description, regex, command...
    local what=$1 re=$2; shift 2
    /usr/bin/time -f '%M' -o "$tmp/rss" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? rss
    rss=$(tail -n 1 "$tmp/rss")
    check "$what: exit 1" test "$rc" -eq 1
    check "$what: one line naming it ($(head -c 160 "$tmp/err"))" \
        test "$(wc -l <"$tmp/err")" -eq 1 -a -n "$(grep -E "^quill: .*$re" "$tmp/err")"
    check "$what: no memory spent (peak RSS $rss KB)" test "${rss:-999999}" -lt 300000
}

fails_with "a 4096-layer model at -c 16777216" \
    "the KV cache \(4096 layers x 16777216 positions x 32 values\) needs [0-9.]+ MiB, but only [0-9.]+ MiB of memory is available" \
    "$QUILL" -m "$tmp/layers-4096.gguf" -c 16777216 -n 1 x
fails_with "a 4096-layer batch with 64 sequences at -c 65536" "the KV cache .* needs" \
    "$QUILL" batch -m "$tmp/layers-4096.gguf" -c 65536 --parallel 63 < /dev/null

# the file is otherwise a model that runs (the refusal is about memory, not the file)
"$QUILL" -m "$tmp/layers-4096.gguf" -c 16 -n 1 --temp 0 x >/dev/null 2>"$tmp/err"
check "the 4096-layer model runs at -c 16" test $? -eq 0

fails_with "+inf output norm" "non-finite logit" "$QUILL" -m "$tmp/inf-norm.gguf" -n 4 "Once upon a time"
fails_with "a NaN embedding row (BOS)" "non-finite logit" "$QUILL" -m "$tmp/nan-embd.gguf" -n 4 "Once upon a time"
echo '{"prompt": "Once"}' >"$tmp/one.jsonl"
"$QUILL" batch -m "$tmp/nan-embd.gguf" -i "$tmp/one.jsonl" >"$tmp/out" 2>"$tmp/err"
check "batch on the NaN model: exit 1 naming it" \
    bash -c "test $? -eq 1 && grep -q 'non-finite logit' '$tmp/err'"

# a huge stdin: refused as soon as it holds more than the context can (a 512-token
# context x the longest piece), not read whole (1 GiB would be several GiB held)
truncate -s 1G "$tmp/big"  # sparse: 1 GiB of NUL bytes that take no room
fails_with "1 GiB of prompt on stdin" "the prompt on stdin is longer than [0-9]+ bytes: more than the context can hold" \
    "$QUILL" -m "$M" -n 1 <"$tmp/big"
fails_with "1 GiB of prompt in -f FILE" "big is longer than [0-9]+ bytes" "$QUILL" -m "$M" -n 1 -f "$tmp/big"
head -c 1073741824 /dev/zero | /usr/bin/time -f '%M' -o "$tmp/rss" "$QUILL" -m "$M" -n 1 >/dev/null 2>"$tmp/err"
check "1 GiB through a pipe: refused early (peak RSS $(tail -n 1 "$tmp/rss") KB)" \
    bash -c "grep -q 'longer than' '$tmp/err' && test $(tail -n 1 "$tmp/rss") -lt 300000"
fails_with "a prompt longer than the context" "the prompt is [0-9]+ tokens but the context holds 16" \
    "$QUILL" -m "$M" -c 16 -n 1 "Once upon a time there was a little girl named Lily who loved to play outside"

# -c past the trained context (512) warns and runs
"$QUILL" -m "$M" -c 1024 -n 2 --temp 0 "Once" >/dev/null 2>"$tmp/err"
check "-c 1024 > trained 512: exit 0" test $? -eq 0
check "-c 1024 > trained 512: warns" grep -q "warning: a context of 1024 tokens is longer than the 512 the model was trained on" "$tmp/err"
"$QUILL" -m "$M" -c 512 -n 2 --temp 0 "Once" >/dev/null 2>"$tmp/err"
check "-c 512 = trained: no warning" test -z "$(grep warning "$tmp/err")"
exit $fail
