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
