#!/usr/bin/env bash
# tests/run.sh BUILD SHARED — runs every test: the C unit tests in BUILD/tests
# and the shell tests tests/t_*.sh (given QUILL=BUILD/quill and SHARED).
# Each test exits 0 on pass; the last line counts them.
set -u
build=${1:-build}; shared=${2:-../shared}
export QUILL="$build/quill" SHARED="$shared" BUILD="$build"
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0; failed=()
run() {  # name, command...
    local name=$1; shift
    local log; log=$(mktemp)
    if "$@" >"$log" 2>&1; then pass=$((pass+1)); echo "ok   $name"
    else fail=$((fail+1)); failed+=("$name"); echo "FAIL $name"; tail -n 30 "$log" | sed 's/^/     /'; fi
    rm -f "$log"
}
for t in "$build"/tests/test_*; do [ -x "$t" ] && run "$(basename "$t")" "$t"; done
for t in tests/t_*.sh; do [ -f "$t" ] && run "$(basename "$t")" bash "$t"; done
echo "${failed[*]:+failed: ${failed[*]}}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
