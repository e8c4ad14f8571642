#!/usr/bin/env bash
# setup.sh, the README's first command: nothing to do where every package is
# there; without apt-get, one line naming the packages to install.
set -u
. "$(dirname "$0")/lib.sh"
# (only where they all are: a test must not install packages)
pkgs=$(sed -n 's/^PACKAGES="\(.*\)"$/\1/p' setup.sh)
check "setup.sh lists its packages" test -n "$pkgs"
# shellcheck disable=SC2086
if dpkg-query -W -f='${Status}\n' $pkgs 2>/dev/null | grep -c "ok installed" | grep -qx "$(wc -w <<<"$pkgs")"; then
    ./setup.sh --deps >"$tmp/out" 2>"$tmp/err"
    check "all packages there: exit 0" test $? -eq 0
    check "all packages there: nothing said" test ! -s "$tmp/out" -a ! -s "$tmp/err"
else
    echo "skip all packages there: some of setup.sh's packages are missing here"
fi
# a machine without dpkg or apt-get: only sh's own commands on the PATH
mkdir "$tmp/bin"
for c in sh grep id; do ln -s "$(command -v $c)" "$tmp/bin/$c"; done
PATH="$tmp/bin" ./setup.sh --deps >"$tmp/out" 2>"$tmp/err"
check "no apt-get: exit 1" test $? -eq 1
check "no apt-get: one line on stderr" test "$(wc -l <"$tmp/err")" -eq 1 -a ! -s "$tmp/out"
check "no apt-get: it names the packages" grep -q "no apt-get here; install these packages.* libpcre2-dev .*libedit-dev" "$tmp/err"
exit $fail
