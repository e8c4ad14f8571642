#!/bin/sh
# setup.sh — quill on a fresh Debian or Ubuntu machine, in one command:
#   ./setup.sh         installs the packages the build and the tests need that are
#                      missing (apt-get, as root or through sudo, saying which),
#                      builds quill and runs the demo (`make demo`)
#   ./setup.sh --deps  only the packages (what .ci/run does before `make test`)
# The one list of packages is PACKAGES below. Then `make test` runs every test.
set -eu
case $0 in */*) cd "${0%/*}" ;; esac
PACKAGES="build-essential python3-numpy python3-jinja2 python3-jsonschema libpcre2-dev libzstd-dev zstd libjansson-dev libedit-dev zsh groff-base clang libclang-rt-dev"
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "setup.sh: no apt-get here; install these packages (or your system's equivalents):$missing" >&2
        exit 1
    fi
    if [ "$(id -u)" = 0 ]; then
        sudo=""
    elif command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "setup.sh: installing$missing needs root: run 'apt-get install$missing' as root" >&2
        exit 1
    fi
    echo "setup.sh: installing$missing" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086  # $missing is a list of package names
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
[ "${1:-}" = --deps ] && exit 0
make -j"$(nproc)"
make --no-print-directory demo
