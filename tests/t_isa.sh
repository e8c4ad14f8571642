#!/usr/bin/env bash
# tests/t_isa.sh — quant.c's three q_matmul implementations (AVX-512 VNNI, AVX2,
# portable C) compute the same bits, so quill's output does not depend on the
# machine it was built for (the goldens, which this build passes, then hold on
# every x86-64 machine and on every other architecture).
#   env: BUILD (build). Run from the repo root; exit 0 = pass.
#
# test_quant --dump prints a hash of q_matmul's output for 550 products over
# every weight type and every path (unit tails, K chunks of multi-token products,
# row blocks, lone tokens). This build's dump is compared with those of
# test_quant compiled here for x86-64-v3 (AVX2) and with no SIMD at all. On a
# machine without AVX-512 this build is the AVX2 one; without AVX2 (or not
# x86-64) only the portable copy is compared.
set -u
. tests/lib.sh
BUILD=${BUILD:-build}
CC=${CC:-cc}
"$BUILD/tests/test_quant" --dump >"$tmp/this.txt" || { echo "FAIL test_quant --dump"; exit 1; }
echo "this build: $(head -1 "$tmp/this.txt")"
flavours=("portable:-O2")
if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
    flavours+=("avx2:-O2 -march=x86-64-v3")
fi
for f in "${flavours[@]}"; do
    name=${f%%:*}
    # shellcheck disable=SC2086  # the flags are words
    if ! $CC ${f#*:} -std=c11 -D_GNU_SOURCE -fopenmp -I. -o "$tmp/tq_$name" tests/test_quant.c quant.c util.c -lm; then
        echo "FAIL could not compile the $name copy of test_quant"
        fail=1
        continue
    fi
    "$tmp/tq_$name" --dump >"$tmp/$name.txt"
    check "$name copy ($(head -1 "$tmp/$name.txt")): the same bits as this build" \
        cmp -s <(tail -n +2 "$tmp/this.txt") <(tail -n +2 "$tmp/$name.txt")
done
exit $fail
