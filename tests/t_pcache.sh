#!/usr/bin/env bash
# tests/t_pcache.sh — --prompt-cache through the command line.
#   env: QUILL (quill binary), SHARED (../shared). Run from the repo root; exit 0 = pass.
#
# The invariant: greedy output is byte-identical with no cache, a cold cache, a warm one
# (same prompt, a longer prompt sharing a prefix, a diverging prompt), and every kind of bad
# cache. A bad cache (another model, another KV type or backend, a future version, wrong
# magic, empty, truncated in the header, ids or payload, a flipped byte in each, trailing
# bytes, too long for the context, a directory) costs exactly one stderr line
# "quill: prompt cache FILE: REASON; ignoring it", exit 0, a cold run (cached_tokens 0 in
# --stats-json), and the file rewritten valid, so the next run is warm. Warm runs must
# really skip the prefill: cached_tokens is the common prefix of the token ids (from
# `quill tokenize`). Files are checked by tests/pcache_file.py, a reader written from the
# format description (hashes, sizes, the zstd frame via the zstd tool, ids, shape). Writes
# are atomic: a write that fails (missing directory, file size limit) leaves the old file
# as it was, no temp file, and one warning.
set -u
. "$(dirname "$0")/lib.sh"
M="$SHARED/models/gguf/stories260K.gguf"
M8="$SHARED/models/gguf/stories260K-Q8_0.gguf"
M656=models/tinystories-656K.gguf
PF="$PY tests/pcache_file.py"
if [ ! -f "$M" ] || [ ! -f "$M8" ]; then echo "t_pcache: $M or $M8 not found" >&2; exit 1; fi
if ! command -v zstd >/dev/null; then echo "t_pcache: the zstd tool is needed (apt-get install zstd)" >&2; exit 1; fi
P1="Once upon a time there was a little girl named Lily"
P2="$P1. She loved to play in the park with her dog"
P3="Once upon a time the sun was hot and the sky was blue"
C="$tmp/c.bin"
# The CPU backend for most runs: fast where a CUDA build probes for a GPU on every start;
# the synthetic-model checks below use the default backend (CUDA where there is a GPU).
BK=$("$QUILL" --help | grep -q -- '--cpu' && echo --cpu)

# runs quill greedy on a prompt with an optional cache: stdout, stderr, status, stats in $tmp
q() {  # cache ("" for none), prompt, more args...
    local cache=$1 prompt=$2
    shift 2
    "$QUILL" -m "$M" $BK --temp 0 -n 64 --stats-json "$tmp/s.json" ${cache:+--prompt-cache "$cache"} "$@" "$prompt" \
        >"$tmp/out" 2>"$tmp/err" </dev/null
    echo $? >"$tmp/rc"
}
ids() { "$QUILL" tokenize -m "${2:-$M}" --ids "$1"; }
common() {  # common prefix of two id lists, at most len(second) - 1
    local -a a=($1) b=($2)
    local k=0
    while [ $k -lt ${#a[@]} ] && [ $k -lt ${#b[@]} ] && [ "${a[k]}" = "${b[k]}" ]; do k=$((k + 1)); done
    echo $((k < ${#b[@]} - 1 ? k : ${#b[@]} - 1))
}
rc0() { [ "$(cat "$tmp/rc")" = 0 ]; }
same_as() { cmp -s "$tmp/out" "$tmp/$1"; }
cached_is() { grep -q "\"cached_tokens\": $1," "$tmp/s.json"; }
warnings() { grep -c '^quill: prompt cache ' "$tmp/err"; }
no_warning() { [ "$(warnings)" = 0 ] && ! grep -qi 'error\|sanitizer' "$tmp/err"; }
# exactly one warning line about the cache, matching the regex, and no sanitizer report
# (other notes, such as a CUDA build's "no CUDA device", may be there too)
one_warning() {
    [ "$(warnings)" = 1 ] && grep -q "^quill: prompt cache .*: .*$1" "$tmp/err" &&
        ! grep -qi 'sanitizer\|runtime error' "$tmp/err"
}
# valid FILE IDS: quill's next run will say whether it accepts the file; the independent
# reader checks a snapshot of it at the end, all in one run (Python starts slowly here)
mkdir "$tmp/snap"
valid() {
    local n; n=$(ls "$tmp/snap" | wc -l)
    cp "$1" "$tmp/snap/$n.bin" && printf '%s\t%s\t%s\n' "$tmp/snap/$n.bin" "$2" "$M" >>"$tmp/manifest"
}
no_temp_files() { [ -z "$(find "$tmp" -name '*.tmp-*')" ]; }
all() {  # every argument, a command line (word-split, with eval for quotes), must succeed
    local c
    for c in "$@"; do eval "$c" || return 1; done
}

I1=$(ids "$P1"); I2=$(ids "$P2"); I3=$(ids "$P3")
n1=$(wc -w <<<"$I1")
for i in 1 2 3; do
    p=P$i
    q "" "${!p}"
    cp "$tmp/out" "$tmp/ref$i"
    check "reference $i: exit 0, some text" all rc0 "test -s $tmp/ref$i"
done

# ---- good caches -----------------------------------------------------------------
q "$C" "$P1"
check "cold: same output" same_as ref1
check "cold: exit 0, no warning, 0 cached" all rc0 no_warning "cached_is 0"
check "cold: the cache file is valid and holds the prompt's ids" valid "$C" "$I1"
cp "$C" "$tmp/c1.bin"
q "$C" "$P1"
check "warm, same prompt: same output" same_as ref1
check "warm, same prompt: all but the last token cached" cached_is $((n1 - 1))
check "warm, same prompt: no warning" no_warning
check "warm, same prompt: the file is not rewritten" cmp -s "$C" "$tmp/c1.bin"
q "$C" "$P2"
check "warm, longer prompt: same output as without a cache" same_as ref2
check "warm, longer prompt: the common prefix cached" cached_is "$(common "$I1" "$I2")"
check "warm, longer prompt: rewritten with the longer prompt" valid "$C" "$I2"
q "$C" "$P2"
check "warm, longer prompt again: all but one cached" cached_is $(($(wc -w <<<"$I2") - 1))
q "$C" "$P3"
check "warm, diverging prompt: same output" same_as ref3
check "warm, diverging prompt: the common prefix cached" cached_is "$(common "$I2" "$I3")"
check "warm, diverging prompt: some but not all cached" test "$(common "$I2" "$I3")" -gt 0
check "warm, diverging prompt: rewritten" valid "$C" "$I3"
check "warm runs: no warning" no_warning
rm -f "$C"
"$QUILL" -m "$M" $BK --temp 0 -n 0 -q --prompt-cache "$C" "$P1" >"$tmp/out" 2>"$tmp/err"
check "-n 0 with a cache: prefills and writes it, prints nothing" \
    all "test ! -s $tmp/out" "test ! -s $tmp/err" "valid $C '$I1'"
q "$C" "$P1" --seed 5 --temp 0.8
cp "$tmp/out" "$tmp/sampled"
q "" "$P1" --seed 5 --temp 0.8
check "sampled (seeded) output: warm = no cache" same_as sampled

# A model whose greedy output is fragile (random weights: the top two logits are often
# within 0.05), so a warm start that rounded anything differently would show: a prompt
# that extends a cached one, and the same prompt fully cached. On the default backend:
# a GPU's kernels must also give the same KV for a suffix as for the whole prompt.
MS="$SHARED/models/gguf/synth-llama-Q4_K_M.gguf"
if [ -f "$MS" ]; then
    PA="$(head -c 600 "$SHARED/golden/gpl-3.txt")"
    PB="$(head -c 1400 "$SHARED/golden/gpl-3.txt")"
    s() { "$QUILL" -m "$MS" --temp 0 -n 32 -q --stats-json "$tmp/s.json" "$@" </dev/null; }
    s "$PB" >"$tmp/refB"
    s --prompt-cache "$tmp/cs.bin" "$PA" >/dev/null
    s --prompt-cache "$tmp/cs.bin" "$PB" >"$tmp/out"
    check "synthetic Q4_K_M, extended prompt: same output" same_as refB
    check "synthetic Q4_K_M, extended prompt: the prefix was cached" \
        cached_is "$(common "$("$QUILL" tokenize -m "$MS" --ids "$PA")" "$("$QUILL" tokenize -m "$MS" --ids "$PB")")"
    s --prompt-cache "$tmp/cs.bin" "$PB" >"$tmp/out"
    check "synthetic Q4_K_M, same prompt: same output" same_as refB
    # a q8 KV cache (--kv q8): the same, and an fp16 run refuses its file
    s --kv q8 "$PB" >"$tmp/refQ"
    s --kv q8 --prompt-cache "$tmp/cq.bin" "$PA" >/dev/null
    s --kv q8 --prompt-cache "$tmp/cq.bin" "$PB" >"$tmp/out"
    check "synthetic Q4_K_M, q8 KV, extended prompt: same output" same_as refQ
    check "synthetic Q4_K_M, q8 KV: the prefix was cached" \
        cached_is "$(common "$("$QUILL" tokenize -m "$MS" --ids "$PA")" "$("$QUILL" tokenize -m "$MS" --ids "$PB")")"
    check "synthetic Q4_K_M, q8 KV: the file is valid" $PF check "$tmp/cq.bin" --model "$MS"
    "$QUILL" -m "$MS" --temp 0 -n 32 --prompt-cache "$tmp/cq.bin" "$PB" >"$tmp/out" 2>"$tmp/err" </dev/null
    check "synthetic Q4_K_M, a q8 cache in an fp16 run: one warning, the fp16 output" \
        all "one_warning 'KV type q8, this run uses f16'" "same_as refB"
else
    echo "skip the synthetic model: $MS not found"
fi

# gemma3: its local layers keep only their window (16) and 256 positions more, so a long
# prompt's cache holds them from a floor on (zeros before, the header says where). A
# longer prompt and the same prompt continue from it; a prompt that shares only a prefix
# below the floor's window cannot, and runs cold. fp16 and q8 KV.
MG="$SHARED/models/gguf/synth-gemma3-Q4_K_M.gguf"
if [ -f "$MG" ]; then
    PA="$(head -c 1400 "$SHARED/golden/gpl-3.txt")"
    PB="$(head -c 2800 "$SHARED/golden/gpl-3.txt")"
    PC="$(head -c 100 "$SHARED/golden/gpl-3.txt") and then something else entirely"
    g() { "$QUILL" -m "$MG" --temp 0 -n 16 -q -c 1024 --stats-json "$tmp/s.json" "$@" </dev/null; }
    nA=$(common "$("$QUILL" tokenize -m "$MG" --ids "$PA")" "$("$QUILL" tokenize -m "$MG" --ids "$PB")")
    for kv in f16 q8; do
        g --kv $kv "$PB" >"$tmp/refGB"; g --kv $kv "$PC" >"$tmp/refGC"
        rm -f "$tmp/cg.bin"
        g --kv $kv --prompt-cache "$tmp/cg.bin" "$PA" >/dev/null
        g --kv $kv --prompt-cache "$tmp/cg.bin" "$PB" >"$tmp/out"
        check "gemma3 $kv KV, extended prompt: same output" same_as refGB
        check "gemma3 $kv KV, extended prompt: the prefix was cached" cached_is "$nA"
        check "gemma3 $kv KV: the file is valid, its sliding layers held from a floor > 0" \
            all "$PF check $tmp/cg.bin --model $MG >/dev/null" \
            "$PY -c 'import struct,sys; sys.exit(struct.unpack_from(\"<I\", open(\"$tmp/cg.bin\",\"rb\").read(), 52)[0] == 0)'"
        g --kv $kv --prompt-cache "$tmp/cg.bin" "$PB" >"$tmp/out"
        check "gemma3 $kv KV, same prompt: same output" same_as refGB
        g --kv $kv --prompt-cache "$tmp/cg.bin" "$PC" >"$tmp/out"
        check "gemma3 $kv KV, a prefix below the floor's window: same output, run cold" \
            all "same_as refGC" "cached_is 0"
    done
else
    echo "skip gemma3: $MG not found"
fi

# ---- bad caches --------------------------------------------------------------------
good="$tmp/c1.bin"
flip() {  # file, offset: xor that byte with 0x20
    local b; b=$(od -An -tu1 -j "$2" -N1 "$1")
    printf "\\$(printf %03o $((b ^ 0x20)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
bad() {  # description, regex the warning must match, [again: also run once more]; $C holds the bad file
    local what=$1 want=$2 again=${3:-}
    q "$C" "$P1"
    check "$what: exit 0" rc0
    check "$what: same output" same_as ref1
    check "$what: exactly one warning matching '$want'" one_warning "$want"
    check "$what: a cold run" cached_is 0
    check "$what: the cache is rewritten valid" valid "$C" "$I1"
    [ -n "$again" ] || return 0
    q "$C" "$P1"
    check "$what: the next run is warm, quiet, the same" all no_warning "cached_is $((n1 - 1))" "same_as ref1"
}
size=$(stat -c %s "$good")
"$QUILL" -m "$M8" $BK -n 0 -q --prompt-cache "$C" "$P1"; bad "another model (stories260K Q8_0)" "another model (stories260K-Q8_0.gguf)" again
if [ -f "$M656" ]; then
    "$QUILL" -m "$M656" $BK -n 0 -q --prompt-cache "$C" "$P1"; bad "another model (tinystories-656K)" "another model"
else
    echo "skip another model (tinystories-656K): $M656 not found (make models)"
fi
cp "$good" "$C"; $PF patch "$C" version 2; bad "a future format version" "version 2 is newer" again
cp "$good" "$C"; $PF patch "$C" kv_type 2; bad "another KV type" "KV type"
cp "$good" "$C"; $PF patch "$C" backend "cuda, sm_90"; bad "another backend" "backend 'cuda, sm_90'"
cp "$good" "$C"; $PF patch "$C" id:2 512; bad "a token id outside the vocabulary" "outside the vocabulary"
cp "$good" "$C"; flip "$C" 0; bad "wrong magic" "bad magic"
: >"$C"; bad "an empty file" "empty file"
H=192  # header bytes
for cut in 5 100 $((H + 8)) $((H + 4 * n1 + 20)) $((size - 1)); do
    head -c "$cut" "$good" >"$C"; bad "truncated to $cut bytes" "truncated"
done
for at in 33 150 $((H + 4)); do
    cp "$good" "$C"; flip "$C" "$at"; bad "a flipped byte in the header/ids at $at" "corrupt"
done
for at in $((H + 4 * n1 + 10)) $(((size + H + 4 * n1) / 2)) $((size - 2)); do
    cp "$good" "$C"; flip "$C" "$at"; bad "a flipped byte in the payload at $at" "corrupt payload" again
done
cp "$good" "$C"; printf 'x' >>"$C"; bad "a byte appended" "trailing"
# a cache longer than this run's context (a smaller -c): ignored, rewritten
"$QUILL" -m "$M" $BK -n 0 -q --prompt-cache "$C" "$P2"
q "" "$P1" -c $((n1 + 4)) -n 3; cp "$tmp/out" "$tmp/ref_short"
q "$C" "$P1" -c $((n1 + 4)) -n 3
check "a cache longer than the context: same output" same_as ref_short
check "a cache longer than the context: one warning" one_warning "more than the context"
check "a cache longer than the context: rewritten" valid "$C" "$I1"

# ---- paths that cannot hold a cache ------------------------------------------------
mkdir "$tmp/dir"
q "$tmp/dir" "$P1"
check "a directory: exit 0, same output" all rc0 "same_as ref1"
check "a directory: one warning, not written" one_warning "is a directory"
check "a directory: left alone and empty" rmdir "$tmp/dir"
q "$tmp/no/such/dir/c.bin" "$P1"
check "a missing directory: exit 0, same output" all rc0 "same_as ref1"
check "a missing directory: one warning, not saved" one_warning "not saved: cannot create a temp file"
q "$good/c.bin" "$P1"
check "a file as a directory: exit 0, same output" all rc0 "same_as ref1"
check "a file as a directory: one warning" one_warning "Not a directory"
if [ "$(id -u)" != 0 ]; then
    mkdir "$tmp/ro" && chmod 500 "$tmp/ro"
    q "$tmp/ro/c.bin" "$P1"
    check "a read-only directory: exit 0, one warning" all rc0 "one_warning 'Permission denied'"
    chmod 700 "$tmp/ro"
fi
# A write that fails midway (the file size limit: write gets EFBIG, with SIGXFSZ ignored):
# the old cache stays byte-identical and no temp file is left.
"$QUILL" -m "$M" $BK -n 0 -q --prompt-cache "$tmp/c2.bin" "$P2"
limit=$(( $(stat -c %s "$tmp/c2.bin") / 1024 - 1 ))
cp "$good" "$C"
if [ "$limit" -ge 1 ] && [ "$(stat -c %s "$C")" -le $((limit * 1024)) ]; then
    (trap '' XFSZ; ulimit -f "$limit"; q "$C" "$P2")
    check "a failed write: exit 0, same output" all rc0 "same_as ref2"
    check "a failed write: one warning" one_warning "not saved: cannot write: File too large"
    check "a failed write: the old cache is untouched" cmp -s "$C" "$good"
else
    echo "skip a failed write: cache sizes do not allow a file size limit between them"
fi
check "no temp files left anywhere" no_temp_files
check "every cache written is valid to an independent reader ($(wc -l <"$tmp/manifest") files)" \
    $PF check-many "$tmp/manifest"
exit $fail
