#!/usr/bin/env bash
# The command line's Unix manners: stdout carries only the product, failures
# exit non-zero with one line naming the problem, pipes closed early are quiet.
set -u
M="$SHARED/models/gguf/stories260K.gguf"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
check() {  # description, then a command that must succeed
    local d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails+1)); fi
}
# runs quill; captures stdout, stderr and the exit status
q() { "$QUILL" "$@" >"$T/out" 2>"$T/err" </dev/null; echo $? >"$T/rc"; }
qin() { local in=$1; shift; "$QUILL" "$@" >"$T/out" 2>"$T/err" <<<"$in"; echo $? >"$T/rc"; }
rc() { [ "$(cat "$T/rc")" = "$1" ]; }
err_has() { grep -q -- "$1" "$T/err"; }
one_line_err() { [ "$(wc -l <"$T/err")" = 1 ] && err_has "^quill: "; }

q --help;                                   check "--help exits 0 and lists options" rc 0
check "--help mentions --stats-json" grep -q -- --stats-json "$T/out"
q -m "$M" --bogus x;                        check "unknown option: exit 1" rc 1
check "unknown option: one line naming it" one_line_err
check "unknown option named" err_has "'--bogus'"
q -m "$T/missing.gguf" hi;                  check "missing model: exit 1, one line" rc 1
check "missing model: names the file" err_has "missing.gguf"
q -m "$M" -n abc hi;                        check "bad -n: exit 1" rc 1
q hi;                                       check "no model: exit 1" rc 1
q -m "$M" --temp 0 -n 8 -q "Once upon a time"; check "generation exits 0" rc 0
check "-q: stderr empty" test ! -s "$T/err"
cp "$T/out" "$T/args.txt"
qin "Once upon a time" -m "$M" --temp 0 -n 8 -q; check "prompt from stdin = from args" cmp -s "$T/out" "$T/args.txt"
q -m "$M" --temp 0 -n 8 --echo -q "Once upon a time"
check "--echo prints the prompt first" test "$(cat "$T/out")" = "Once upon a time$(cat "$T/args.txt")"
q -m "$M" --temp 0 -n 8 "Once upon a time"
check "stats line on stderr" err_has "TTFT .* TPOT"
check "stdout identical with stats on" cmp -s "$T/out" "$T/args.txt"
q -m "$M" --temp 0 -n 8 -q --stats-json "$T/s.json" "Once upon a time"
check "--stats-json is JSON with the figures" python3 -c "
import json,sys; d=json.load(open('$T/s.json'))
assert d['prompt_tokens']==5 and d['generated_tokens']==8 and d['ttft_ms']>0 and d['finish_reason']=='length', d"
q -m "$M" --temp 0 -n 32 -q --stop "Lily" "Once upon a time"
check "--stop cuts before the stop string" test "$(cat "$T/out")" = ", there was a little girl named "
q -m "$M" --temp 0.9 --seed 7 -n 24 -q "Lily wanted to"; cp "$T/out" "$T/s1"
q -m "$M" --temp 0.9 --seed 7 -n 24 -q "Lily wanted to"
check "same seed, same output" cmp -s "$T/out" "$T/s1"
q -m "$M" --temp 0.9 --seed 8 -n 24 -q "Lily wanted to"
check "another seed, another output" bash -c "! cmp -s '$T/out' '$T/s1'"
q -m "$M" -c 8 "Once upon a time there was a little girl named Lily";  check "prompt longer than context: exit 1" rc 1
check "prompt too long: says so" err_has "context"
q -m "$M" --temp 0 -c 12 "Once upon a time"; check "context end: exit 0" rc 0
check "context end: said on stderr" err_has "context full"
printf 'Once \xff upon' >"$T/bad.txt"
q -m "$M" -f "$T/bad.txt";                  check "invalid UTF-8 prompt: exit 1" rc 1
check "invalid UTF-8: says so" err_has "UTF-8"
"$QUILL" -m "$M" --temp 0 -n 400 -c 512 "Once upon a time" 2>"$T/err" | head -c 10 >/dev/null
check "closed pipe: exit 0" test "${PIPESTATUS[0]}" = 0
check "closed pipe: no error" bash -c "! grep -qi error '$T/err'"
q info "$M";                                check "info exits 0" rc 0
check "info lists tensors and metadata" bash -c "grep -q 'token_embd.weight' '$T/out' && grep -q 'general.architecture' '$T/out'"
q -m "$M" --temp 0 -n 0 -q "Once";          check "-n 0 prints nothing" test ! -s "$T/out"
# a CUDA build on a machine with no NVIDIA driver: a CPU run says nothing of CUDA
# (its stats line names the backend); --gpu fails with the reason
if [ ! -e /dev/nvidiactl ] && [ ! -e /dev/dxg ]; then
    q -m "$M" --temp 0 -n 2 "Once";         check "no driver: no CUDA notice" bash -c "! grep -qi cuda '$T/err'"
    check "no driver: the stats line names the CPU" err_has "| cpu, "
    q --gpu -m "$M" -n 1 x;                 check "no driver: --gpu fails" rc 1
    check "no driver: --gpu names the reason" err_has "--gpu: .*\(driver\|without CUDA\)"
fi
check "the CUDA runtime is linked in (no libcudart to find at run time)" bash -c "! ldd '$QUILL' | grep -q libcudart"
exit $((fails > 0))
