#!/usr/bin/env bash
# tests/t_types.sh — every weight type models/convert.py writes, end to end through quill.
#   env: SHARED (../shared), QUILL (build/quill), BUILD (unused). Run from the repo root;
#   exit 0 = pass.
#
# For T in F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1, stories260K.bin is converted with --type T
# (ffn_down's rows of 172 fall back to F16, norms stay F32, token_embd is T) and quill is
# checked against models/npllama.py, a float64 numpy forward over the same dequantized
# weights:
#   (a) `quill ppl -c 128` is within 1% of npllama's perplexity (llama.cpp's protocol) on
#       the same text: the first 136 lines of golden/gpl-3.txt (33 chunks, 2079 tokens
#       scored; the whole file, 173 chunks, would make the numpy side too slow);
#   (b) quill's greedy 32 tokens after "Once upon a time" start with the text of npllama's
#       first 16 greedy tokens. When the 32 differ both are printed, with npllama's top-2
#       logit margin where they part (a near-tie there means rounding, not a bug).
# Also: our Q5_0 and Q4_0 quantizers are byte-identical to llama-quantize's on the tensors
# of those types in $SHARED/models/gguf (there is no llama.cpp Q4_1/Q5_1 file to compare).
# The references are computed once per run, in one python process, into the temp dir.
set -u
SHARED=${SHARED:-../shared}
QUILL=${QUILL:-build/quill}
PY=${PYTHON:-/usr/bin/python3}
if [ ! -d "$SHARED/models" ]; then
    echo "t_types: $SHARED/models not found; skipped" >&2
    exit 0
fi
if [ ! -x "$QUILL" ]; then
    echo "t_types: $QUILL is not executable (make quill first)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
types="F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1"
prompt="Once upon a time"
l2c=$SHARED/models/llama2c
head -n 136 "$SHARED/golden/gpl-3.txt" >"$tmp/text.txt"
start=$SECONDS

# quill's OpenMP threads spin while they wait; on a busy machine that costs more than the
# work (quill's results do not depend on it).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

pids=()
for t in $types; do
    $PY models/convert.py "$l2c/stories260K.bin" --tokenizer "$l2c/tok512.bin" --type "$t" \
        -o "$tmp/$t.gguf" 2>"$tmp/$t.convert.log" &
    pids+=($!)
done
k=0
for t in $types; do
    if ! wait "${pids[$k]}"; then
        cat "$tmp/$t.convert.log"
        echo "FAIL convert --type $t"
        exit 1
    fi
    k=$((k + 1))
done

# Per type: T.ppl (npllama's "PPL = ..." line), T.16 / T.32 (the text of its first 16 / 32
# greedy tokens), T.steps (JSON [text so far, top-2 margin] per step).
if ! $PY - "$tmp" "$prompt" "$SHARED/models/gguf" $types <<'EOF'
import json, os, sys
sys.path.insert(0, "models")
import npllama
from gguf_reader import GGUFReader
from gguf_writer import GGML_TYPES, TYPE_BY_NAME, GGMLType, quantize

tmp, prompt, gguf, types = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

# Our quantizers against llama-quantize's: its Q4_K_M file falls back to Q5_0 for rows of
# 64, its Q4_0 file has Q4_0 tensors; the source is llama.cpp's F32 conversion.
src = GGUFReader(os.path.join(gguf, "stories260K.gguf"))
for fname, ty in (("stories260K-Q4_K_M.gguf", GGMLType.Q5_0),
                  ("stories260K-Q4_0.gguf", GGMLType.Q4_0)):
    r, n, tname = GGUFReader(os.path.join(gguf, fname)), 0, GGML_TYPES[ty][0]
    for name, t in r.tensors.items():
        if t.type == ty:
            n += 1
            ours = quantize(src.tensor_float(src.tensors[name]), ty).tobytes()
            if ours != bytes(r.tensor_bytes(t)):
                sys.exit("%s: %s: our %s differs from llama-quantize's" % (fname, name, tname))
    if n == 0:
        sys.exit("%s: no %s tensors" % (fname, tname))
    print("ok   our %s quantizer equals llama-quantize's on %s (%d tensors)" % (tname, fname, n))

text = open(os.path.join(tmp, "text.txt"), encoding="utf-8").read()
for t in types:
    m = npllama.LlamaRef(os.path.join(tmp, t + ".gguf"))
    want = {"token_embd.weight": t, "blk.0.attn_q.weight": t, "blk.0.attn_norm.weight": "F32",
            "blk.0.ffn_down.weight": "BF16" if t == "BF16" else "F16"}
    for name, ty in want.items():
        if m.r.tensors[name].type != TYPE_BY_NAME[ty]:
            sys.exit("%s.gguf: %s is %s, not %s" % (t, name, m.r.tensors[name].type_name, ty))
    tok = npllama.SPMTokenizer(m.r)
    ppl, err, _ = npllama.perplexity(m, tok.encode(text), 128, tok.bos)
    with open(os.path.join(tmp, t + ".ppl"), "w") as f:
        f.write("PPL = %.4f +/- %.5f\n" % (ppl, err))
    margins = []
    out = npllama.greedy(m, tok.encode(prompt), 32, stop=tok.eos, margins=margins)
    for k in (16, 32):
        with open(os.path.join(tmp, "%s.%d" % (t, k)), "w", encoding="utf-8") as f:
            f.write(tok.decode(out[:k]))
    with open(os.path.join(tmp, t + ".steps"), "w") as f:
        json.dump([[tok.decode(out[:k + 1]), margins[k]] for k in range(len(out))], f)
EOF
then
    echo "FAIL npllama references"
    exit 1
fi
echo "t_types: conversions and references: $((SECONDS - start)) s"

# divergence TYPE TEXT: the token where quill's text leaves npllama's, and npllama's margins.
# A token can be a prefix of the one quill chose (" " vs " with"), so the step before counts.
divergence() {
    $PY - "$tmp/$1.steps" "$2" <<'EOF'
import json, sys
steps, gen = json.load(open(sys.argv[1])), sys.argv[2]
k = 0
while k < len(steps) and gen.startswith(steps[k][0]):
    k += 1
if k < len(steps):
    j = max(k - 1, 0)
    print("       they part at token %d or %d; npllama's top-2 logit margins there: %s"
          % (j + 1, k + 1, ", ".join("%.4f" % s[1] for s in steps[j:k + 1])))
EOF
}
ppl_of() { sed -n 's/^PPL = \([0-9.]*\) .*/\1/p' "$1"; }
within_1pct() { $PY -c 'import sys; g, r = map(float, sys.argv[1:]); sys.exit(abs(g - r) > 0.01 * r)' "$@"; }

fail=0
for t in $types; do
    f=$tmp/$t.gguf
    ref=$(ppl_of "$tmp/$t.ppl")
    "$QUILL" ppl -m "$f" -f "$tmp/text.txt" -c 128 -q </dev/null >"$tmp/$t.quill" 2>&1
    got=$(ppl_of "$tmp/$t.quill")
    if [ -n "$got" ] && within_1pct "$got" "$ref"; then
        echo "ok   $t ppl: quill $got, npllama $ref"
    else
        echo "FAIL $t ppl: quill '${got:-$(cat "$tmp/$t.quill")}', npllama $ref (more than 1% apart)"
        fail=1
    fi

    gen=$("$QUILL" -m "$f" --temp 0 -n 32 -q "$prompt" </dev/null 2>"$tmp/$t.err")
    ref16=$(cat "$tmp/$t.16")
    ref32=$(cat "$tmp/$t.32")
    if [ -n "$ref16" ] && [ "$gen" = "$ref32" ]; then
        echo "ok   $t greedy: all 32 tokens' text equals npllama's"
    elif [ -n "$ref16" ] && [ "${gen#"$ref16"}" != "$gen" ]; then
        echo "ok   $t greedy: the first 16 tokens' text equals npllama's; later they differ:"
        printf '       quill:   %s\n       npllama: %s\n' "$gen" "$ref32"
        divergence "$t" "$gen"
    else
        echo "FAIL $t greedy differs within the first 16 tokens:"
        printf '       quill:   %s\n       npllama: %s\n' "$gen" "$ref32"
        divergence "$t" "$gen"
        cat "$tmp/$t.err"
        fail=1
    fi
done
echo "t_types: $((SECONDS - start)) s"
exit $fail
