#!/usr/bin/env bash
# tests/t_isa.sh — the three q_matmul implementations (quant_avx512.c, quant_avx2.c,
# portable C) compute the same bits, so quill's products do not depend on the
# machine it was built for (the goldens this build passes also pass in an
# x86-64-v3 and a no-SIMD build); so do the three builds of the CPU attention
# (cpu_attention.c, test_attention --dump). An x86-64-v3 build of quill
# itself (whose CPU backend repacks weights: quant.h's x8) runs the golden
# continuations.
#   env: BUILD (build). Run from the repo root; exit 0 = pass.
#
# test_quant --dump prints a hash of q_matmul's output for 800 products over
# every weight type and every path (unit tails, K chunks of multi-token products,
# row blocks, lone tokens). This build's dump is compared with those of
# test_quant compiled here for x86-64-v3 (AVX2; also with AVX-VNNI where the
# CPU has it) and with no SIMD at all. On a
# machine without AVX-512 this build is the AVX2 one; without AVX2 (or not
# x86-64) only the portable copy is compared. Where aarch64-linux-gnu-gcc and
# qemu-aarch64 are installed (Debian: gcc-aarch64-linux-gnu, qemu-user; CI does
# not install them), the portable code built for aarch64 is compared as well.
set -u
. tests/lib.sh
BUILD=${BUILD:-build}
CC=${CC:-cc}
# in the ASan run (make test-asan) the copies are sanitized too
san=; [ "${QUILL_SANITIZED:-0}" = 1 ] && san="-fsanitize=address,undefined -fno-sanitize-recover=all"
"$BUILD/tests/test_quant" --dump >"$tmp/this.txt" || { echo "FAIL test_quant --dump"; exit 1; }
echo "this build: $(head -1 "$tmp/this.txt")"
# The MB of weights `quill bench` reads from x8 copies: synth-llama-Q8_0 (untied
# embedding) against its Q8_0 weights but token_embd, counted from the file.
X8M="$SHARED/models/gguf/synth-llama-Q8_0.gguf"
x8_copied() { "$1" bench -m "$X8M" -p 1 -n 1 2>/dev/null | sed -n 's/.*rows interleaved.*: \([0-9.]*\) MB$/\1/p'; }
x8_copies() {  # quill binary, what it is
    local want got
    want=$("$PY" -c 'import sys; sys.path.insert(0, "models"); from gguf_reader import GGUFReader
r = GGUFReader(sys.argv[1])
print("%.1f" % (sum(t.nbytes for t in r.tensors.values() if t.type_name == "Q8_0" and t.name != "token_embd.weight") / 1e6))' "$X8M")
    got=$(x8_copied "$1")
    check "$2: the x8 copies, $got MB, are the Q8_0 weights but the untied embedding ($want MB)" test "$got" = "$want"
}

flavours=("portable:-O3")
if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
    flavours+=("avx2:-O3 -march=x86-64-v3")
    grep -qw avx_vnni /proc/cpuinfo && flavours+=("avx2-vnni:-O3 -march=x86-64-v3 -mavxvnni")
fi
"$BUILD/tests/test_attention" --dump >"$tmp/att_this.txt" || { echo "FAIL test_attention --dump"; exit 1; }
for f in "${flavours[@]}"; do
    name=${f%%:*}
    # shellcheck disable=SC2086  # the flags are words
    if ! $CC ${f#*:} $san -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I. -o "$tmp/tq_$name" tests/test_quant.c mapping.c quant*.c threads.c util.c -lm -lpthread ||
        ! $CC ${f#*:} $san -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I. -o "$tmp/ta_$name" tests/test_attention.c cpu_attention.c quant*.c threads.c util.c -lm -lpthread; then
        echo "FAIL could not compile the $name copies of test_quant and test_attention"
        fail=1
        continue
    fi
    "$tmp/tq_$name" --dump >"$tmp/$name.txt"
    check "$name copy ($(head -1 "$tmp/$name.txt")): the same bits as this build" \
        cmp -s <(tail -n +2 "$tmp/this.txt") <(tail -n +2 "$tmp/$name.txt")
    "$tmp/ta_$name" --dump >"$tmp/att_$name.txt"
    check "$name copy of the CPU attention: the same bits as this build" cmp -s "$tmp/att_this.txt" "$tmp/att_$name.txt"
    [ "$name" = avx2 ] || continue
    # quill itself built so: its CPU backend interleaves the weights whose
    # kernels read them faster that way (quant.h's x8: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K
    # here), and must still give llama.cpp's continuations (tests/golden.py), and
    # leave an untied embedding (its rows are looked up one at a time) as it is
    opt=${f#*:}
    [ -n "$san" ] && opt=${opt/-O3/-O1}  # as make test-asan builds
    if ! make -s --no-print-directory -j2 BUILD="$tmp/build_$name" CUDA=0 OPT="$opt" SAN="$san" \
        "$tmp/build_$name/quill" >"$tmp/make_$name.log" 2>&1; then
        cat "$tmp/make_$name.log"
        echo "FAIL could not build the $name quill"
        fail=1
    elif "$PY" tests/golden.py "$tmp/build_$name/quill" "$SHARED" continuations >"$tmp/golden_$name.txt" 2>&1; then
        echo "ok   $name build of quill: $(grep -c '^ok' "$tmp/golden_$name.txt") continuations as llama.cpp's, no failures"
    else
        grep -v '^ok' "$tmp/golden_$name.txt"
        echo "FAIL $name build of quill: the golden continuations"
        fail=1
    fi
    [ -x "$tmp/build_$name/quill" ] && x8_copies "$tmp/build_$name/quill" "$name build of quill"
done
# this build's quill too, where it copies weights (not a build without SIMD kernels)
[ -n "$(x8_copied "$QUILL")" ] && x8_copies "$QUILL" "this build's quill"
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
    if aarch64-linux-gnu-gcc -O2 -std=c11 -D_GNU_SOURCE -I. -o "$tmp/tq_arm" tests/test_quant.c mapping.c quant*.c threads.c util.c -lm -lpthread &&
        qemu-aarch64 -L /usr/aarch64-linux-gnu "$tmp/tq_arm" --dump >"$tmp/arm.txt"; then
        check "aarch64 copy, under qemu ($(head -1 "$tmp/arm.txt")): the same bits as this build" \
            cmp -s <(tail -n +2 "$tmp/this.txt") <(tail -n +2 "$tmp/arm.txt")
    else
        echo "FAIL could not build or run the aarch64 copy of test_quant"
        fail=1
    fi
fi
exit $fail
