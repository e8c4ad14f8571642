# tests/lib.sh — sourced by the shell tests: defaults, a temp dir removed on
# exit, and `check DESCRIPTION COMMAND...` which prints ok/FAIL and sets fail=1.
SHARED=${SHARED:-../shared}
QUILL=${QUILL:-build/quill}
PY=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # description, command...
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
