#!/usr/bin/env bash
# The prompt exactly as given (README, "The prompt is ..."): arguments and -f
# byte for byte, trailing newlines included, in generation, `tokenize`, `ppl`
# and batch records; a prompt from stdin loses one trailing newline in
# generation only. The expected ids are llama.cpp's own tokenizer test vectors
# ($SHARED/vocab/*.inp, *.out) that end in whitespace and newlines.
set -u
. "$(dirname "$0")/lib.sh"
M=$SHARED/models/gguf/stories260K.gguf

# llama.cpp's vectors that end in a newline, through an argument, -f and stdin
for name in llama-spm llama-bpe; do
    V=$SHARED/vocab/ggml-vocab-$name.gguf
    rm -f "$tmp"/case*
    $PY - "$V" "$tmp" <<'PY'
import sys
vocab, out = sys.argv[1], sys.argv[2]
inp = open(vocab + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
ids = open(vocab + ".out").read().split("\n")
k = 0
for text, want in zip(inp, ids):
    if text.endswith("\n"):
        open("%s/case%d.txt" % (out, k), "w", encoding="utf-8", newline="").write(text)
        open("%s/case%d.ids" % (out, k), "w").write(want + "\n")
        k += 1
assert k >= 3, k
PY
    for c in "$tmp"/case*.txt; do
        want=$(echo $(cat "${c%.txt}.ids"))  # (the .out lines start with a space)
        IFS= read -r -d '' text <"$c" || true  # (keeps the trailing newlines that $(...) would drop)
        what="tokenize $name $(od -An -c "$c" | tr -s ' ' | head -c 40)"
        tok() { "$QUILL" tokenize --ids --no-bos -m "$V" "$@"; }
        check "$what: argument = llama.cpp" test "$(tok "$text")" = "$want"
        check "$what: -f FILE = llama.cpp" test "$(tok -f "$c")" = "$want"
        check "$what: stdin, verbatim = llama.cpp" test "$(tok <"$c")" = "$want"
    done
done

# generation: the argument's newline is prompt; stdin drops one (echo's)
stat_tokens() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))['prompt_tokens'])" "$tmp/s.json"; }
gen() { "$QUILL" -m "$M" --temp 0 -n 4 -q --stats-json "$tmp/s.json" "$@"; }
gen "Once upon a time" >"$tmp/a.txt";            n0=$(stat_tokens)
gen $'Once upon a time\n' >"$tmp/b.txt";         n1=$(stat_tokens)
check "generation: a trailing newline in the argument is a prompt token ($n0 -> $n1)" test "$n1" -eq $((n0 + 1))
printf 'Once upon a time\n' >"$tmp/p1.txt"
gen -f "$tmp/p1.txt" >"$tmp/c.txt";              n2=$(stat_tokens)
check "generation: -f keeps the file's trailing newline" test "$n2" -eq "$n1"
echo "Once upon a time" | gen >"$tmp/d.txt";     n3=$(stat_tokens)
check "generation: stdin drops echo's newline" test "$n3" -eq "$n0"
printf 'Once upon a time\r\n' | gen >"$tmp/e.txt"; n4=$(stat_tokens)
check "generation: stdin drops a CRLF as one newline" test "$n4" -eq "$n0"
printf 'Once upon a time\n\n' | gen >"$tmp/f.txt"; n5=$(stat_tokens)
check "generation: stdin drops only one newline" test "$n5" -eq "$n1"
check "generation: the same prompt gives the same text" cmp -s "$tmp/a.txt" "$tmp/d.txt"

# batch: a record's prompt is taken as it is
printf '%s\n' '{"prompt": "Once upon a time", "n": 1}' '{"prompt": "Once upon a time\n", "n": 1}' >"$tmp/in.jsonl"
"$QUILL" batch -m "$M" --temp 0 -i "$tmp/in.jsonl" -q >"$tmp/out.jsonl"
check "batch: a record's trailing newline is a prompt token" $PY -c "
import json, sys
a, b = (json.loads(l)['prompt_tokens'] for l in open(sys.argv[1]))
assert b == a + 1, (a, b)" "$tmp/out.jsonl"

# ppl: the file as it is. A text of exactly 3·64 tokens whose last two are its
# trailing newlines makes 3 chunks of 64; without them it would make 2.
for w in $(seq 120 200); do
    { printf 'a%.0s ' $(seq "$w"); printf 'end.\n\n'; } >"$tmp/text.txt"
    [ "$("$QUILL" tokenize --ids -m "$M" -f "$tmp/text.txt" | wc -w)" -eq 192 ] && break
done
head -c -2 "$tmp/text.txt" >"$tmp/text-stripped.txt"
"$QUILL" ppl -m "$M" -f "$tmp/text.txt" -c 64 >/dev/null 2>"$tmp/ppl.err"
check "ppl: the file's trailing newlines count (3 chunks of 64)" grep -q "3 chunks of 64 tokens" "$tmp/ppl.err"
"$QUILL" ppl -m "$M" -f "$tmp/text-stripped.txt" -c 64 >/dev/null 2>"$tmp/ppl.err"
check "ppl: without them, 2 chunks" grep -q "2 chunks of 64 tokens" "$tmp/ppl.err"
exit $fail
