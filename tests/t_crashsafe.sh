#!/usr/bin/env bash
# tests/t_crashsafe.sh — the files quill writes survive SIGKILL at any instant: the prompt
# cache, the chat's /save and batch output (tests/crash_loop.py says what is checked).
# 200 kills of the prompt cache and 50 each of /save and batch (under make test-asan,
# whose runs are several times slower, a fifth of that).
#   env: QUILL (quill binary). Run from the repo root; exit 0 = pass.
set -u
. "$(dirname "$0")/lib.sh"
kills=200
[ -n "${QUILL_SANITIZED:-}" ] && kills=40
"$PY" tests/crash_loop.py "$QUILL" models/stories260K.gguf "$tmp" "$kills"
rc=$?
# a path that is no regular file is written through, not replaced: a symlink such as
# /dev/stdout (here one of our own into /proc, so a regression cannot break the machine's)
ln -s /proc/self/fd/1 "$tmp/stdout-link"
json=$("$QUILL" -m models/stories260K.gguf -q -n 2 --temp 0 --stats-json "$tmp/stdout-link" "Once" | tail -c 400)
check "--stats-json through a symlink to stdout: the JSON comes out there" grep -q '"finish_reason"' <<<"$json"
check "--stats-json through a symlink to stdout: the symlink stays" test -L "$tmp/stdout-link"
[ "$rc" -eq 0 ] && exit $fail
exit 1
