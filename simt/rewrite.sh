#!/bin/sh
# simt/rewrite.sh IN OUT — a CUDA file (each of kernels*.cu in turn) as C++ for
# g++ and the SIMT emulation (simt.h): each launch
# `k<<<grid, block, smem, stream>>>(args)` becomes
# `(k | simt::cfg("k", grid, block, smem, stream))(args)`, and
# `extern __shared__ T name[];` becomes `T *name = simt::dyn_smem<T>(...)`.
# Lines keep their numbers (#line names the source). Fails when the number of
# rewritten launches differs from the number of `<<<` in IN, or any is left.
# Headers are not rewritten: kernels_*.cuh hold no launches or extern __shared__.
set -eu
in=$1 out=$2
launches=$(grep -o '<<<' "$in" | wc -l)
{
    printf '#line 1 "%s"\n' "$in"
    sed -E \
        -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>;]*>)?)<<<(.*)>>>\(/(\1 | simt::cfg("\1", \3))(/' \
        -e 's/extern __shared__ ([A-Za-z_][A-Za-z0-9_]*) ([A-Za-z_][A-Za-z0-9_]*)\[\];/\1 *\2 = simt::dyn_smem<\1>(__FILE__, __LINE__);/' \
        "$in"
} >"$out.tmp"
done=$(grep -o 'simt::cfg("' "$out.tmp" | wc -l)
left=$(grep -c '<<<\|>>>\|extern __shared__' "$out.tmp" || true)
if [ "$launches" -ne "$done" ] || [ "$left" -ne 0 ]; then
    echo "simt/rewrite.sh: $in has $launches launches; $done were rewritten and $left lines still have <<<, >>> or extern __shared__" >&2
    rm -f "$out.tmp"
    exit 1
fi
mv "$out.tmp" "$out"
echo "simt/rewrite.sh: $in: $done launches rewritten" >&2
