#!/usr/bin/env bash
# tests/t_convert.sh — models/convert.py against independent references.
#   env: SHARED (../shared), QUILL (path to the quill binary; its checks are skipped
#   when it is not executable), BUILD (unused here). Run from the repo root; exit 0 = pass.
#
# Without quill (numpy reference in models/npllama.py):
#   1. stories260K.bin + tok512.bin → GGUF equals llama.cpp's own conversion
#      (../shared/models/gguf/stories260K.gguf): every tensor byte for byte, same tokenizer.
#      --type F16/BF16/Q8_0 equal llama-quantize's files byte for byte.
#   2. that GGUF's greedy continuation equals llama.cpp's (golden/stories.tsv).
#   3. tinystories-656K (HF) → GGUF: the SentencePiece encoder over our scores gives the
#      reference tokenizer's ids and agrees with BPE on gpl-3.txt; greedy ids from BOS
#      equal golden/tinystories-656K.json (checks the q/k RoPE permutation).
#   4. the int8 (v2) checkpoint → Q8_0 GGUF: greedy text close to the float model's.
#   5. --shared mode writes the three demo models, then finds them up to date.
# With quill: the same greedy outputs from quill itself.
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -d "$SHARED/models" ]; then
    echo "t_convert: $SHARED/models not found; skipped" >&2
    exit 0
fi
l2c=$SHARED/models/llama2c
golden=$SHARED/golden

# --- conversions ---------------------------------------------------------------------
check "convert stories260K.bin" $PY models/convert.py "$l2c/stories260K.bin" \
    --tokenizer "$l2c/tok512.bin" -o "$tmp/stories260K.gguf"
check "convert stories260K-q80-v2.bin (int8)" $PY models/convert.py \
    "$l2c/stories260K-q80-v2.bin" --tokenizer "$l2c/tok512.bin" -o "$tmp/stories260K-q80.gguf"
check "convert tinystories-656K (HF)" $PY models/convert.py "$SHARED/models/tinystories-656K" \
    -o "$tmp/tinystories-656K.gguf"

# --- against references, no quill needed -----------------------------------------------
check "stories260K equals llama.cpp's conversion" \
    $PY models/check_convert.py same-as "$SHARED/models/gguf/stories260K.gguf" "$tmp/stories260K.gguf"
# --type: our F16/BF16/Q8_0 quantizers against llama-quantize's files of the same model
for t in F16 BF16 Q8_0; do
    $PY models/convert.py "$l2c/stories260K.bin" --tokenizer "$l2c/tok512.bin" --type $t \
        -o "$tmp/stories260K-$t.gguf" 2>/dev/null
    check "--type $t equals llama-quantize's stories260K-$t.gguf" $PY models/check_convert.py \
        same-as "$SHARED/models/gguf/stories260K-$t.gguf" "$tmp/stories260K-$t.gguf"
done
while IFS=$'\t' read -r model prompt n want; do
    [ "$model" = stories260K.gguf ] || continue
    want=$($PY -c 'import json,sys; print(json.loads(sys.argv[1]), end="")' "$want")
    check "numpy greedy on converted stories260K: $prompt" \
        $PY models/check_convert.py greedy "$tmp/stories260K.gguf" "$prompt" "$n" "$want"
done < "$golden/stories.tsv"
check "tinystories-656K tokenizer and greedy ids vs golden" \
    $PY models/check_convert.py hf-golden "$tmp/tinystories-656K.gguf" \
    "$SHARED/models/tinystories-656K" "$golden/tinystories-656K.json" "$golden/gpl-3.txt"
check "int8 conversion close to float (numpy)" \
    $PY models/check_convert.py close "$tmp/stories260K-q80.gguf" "$tmp/stories260K.gguf" \
    "Once upon a time" 32 6

# --- --shared mode: all three, then nothing to do ----------------------------------------
$PY models/convert.py --shared "$SHARED" --out "$tmp/shared" 2>"$tmp/first.log"
check "--shared writes 3 models" [ "$(grep -c '<-' "$tmp/first.log")" = 3 ]
$PY models/convert.py --shared "$SHARED" --out "$tmp/shared" 2>"$tmp/second.log"
check "--shared is idempotent" [ "$(grep -c 'up to date' "$tmp/second.log")" = 3 ]
check "--shared output equals single-file conversion" \
    cmp -s "$tmp/shared/stories260K.gguf" "$tmp/stories260K.gguf"

# --- quill on the converted files ----------------------------------------------------------
if [ -x "$QUILL" ]; then
    gen() { "$QUILL" -m "$1" --temp 0 -n "$2" "$3" </dev/null; }
    ref=$(gen "$SHARED/models/gguf/stories260K.gguf" 32 "Once upon a time")
    ours=$(gen "$tmp/stories260K.gguf" 32 "Once upon a time")
    same_nonempty() { [ -n "$1" ] && [ "$1" = "$2" ]; }
    check "quill: converted stories260K = llama.cpp's file" same_nonempty "$ours" "$ref"
    start=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["greedy_from_bos"]["text_starts_with"])' \
        "$golden/tinystories-656K.json")
    out656=$(gen "$tmp/tinystories-656K.gguf" 20 "")
    check "quill: tinystories-656K from BOS starts with the golden text" \
        [ "${out656#"$start"}" != "$out656" ]
    q80=$(gen "$tmp/stories260K-q80.gguf" 32 "Once upon a time")
    check "quill: int8 model prints printable text" \
        $PY -c 'import sys; t=sys.argv[1]; sys.exit(0 if t.strip() and all(c.isprintable() or c=="\n" for c in t) else 1)' "$q80"
    check "quill: int8 model shares 6+ leading words with the float model" \
        $PY -c 'import sys; a,b=sys.argv[1].split(),sys.argv[2].split(); k=0
while k<min(len(a),len(b)) and a[k]==b[k]: k+=1
sys.exit(0 if k>=6 else 1)' "$q80" "$ours"
else
    echo "t_convert: $QUILL not executable; quill checks skipped" >&2
fi
exit $fail
