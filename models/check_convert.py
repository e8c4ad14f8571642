#!/usr/bin/python3
"""check_convert.py — checks convert.py's output against independent references.

    check_convert.py same-as REF.gguf OURS.gguf
        Tensors equal byte for byte (a reference output.weight that we omit must equal our
        token_embd: a tied classifier), same hyperparameters and tokenizer
        (tokens, scores, types, bos/eos/unk).
    check_convert.py greedy OURS.gguf PROMPT N EXPECTED_TEXT
        numpy reference forward (npllama.py): the greedy continuation equals EXPECTED_TEXT
        (from ../shared/golden: llama.cpp's or llama2.c's own output).
    check_convert.py hf-golden OURS.gguf HF_DIR GOLDEN.json [CORPUS.txt ...]
        The SentencePiece encoder over our scores reproduces the reference encodings, and
        greedy ids from BOS equal the golden ones; on the corpus lines our SPM encoding equals a
        re-implementation of the Hugging Face BPE over tokenizer.json.
    check_convert.py close OURS_Q.gguf OURS_F32.gguf PROMPT N MIN_WORDS
        Quantized vs float model: greedy texts share at least MIN_WORDS leading words.

Exit status 0 on pass; each failure is printed to stderr.
"""
import heapq
import json
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUFReader  # noqa: E402
from npllama import LlamaRef, SPMTokenizer, greedy  # noqa: E402

HPARAM_KEYS = ["embedding_length", "feed_forward_length", "block_count", "attention.head_count",
               "attention.head_count_kv", "rope.dimension_count",
               "attention.layer_norm_rms_epsilon"]
TOKEN_KEYS = ["tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
              "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
              "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"]


class Checker:
    def __init__(self):
        self.failures = 0

    def expect(self, ok, msg):
        if not ok:
            self.failures += 1
            print("FAIL: " + msg, file=sys.stderr)
        return ok


def same_as(c, ref_path, ours_path):
    ref, ours = GGUFReader(ref_path), GGUFReader(ours_path)
    arch = ref.kv["general.architecture"]
    c.expect(ours.kv.get("general.architecture") == arch, "architecture")
    for k in HPARAM_KEYS:
        key = "%s.%s" % (arch, k)
        c.expect(ours.kv.get(key) == ref.kv.get(key),
                 "%s: ours %r, reference %r" % (key, ours.kv.get(key), ref.kv.get(key)))
    for k in TOKEN_KEYS:
        a, b = ours.kv.get(k), ref.kv.get(k)
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            diff = [i for i in range(len(a)) if a[i] != b[i]]
            c.expect(not diff, "%s: %d entries differ, first id %s: ours %r, reference %r"
                     % (k, len(diff), diff[:1], a[diff[0]] if diff else None,
                        b[diff[0]] if diff else None))
        else:
            c.expect(a == b, "%s: ours %.80r, reference %.80r" % (k, a, b))
    for name, t in ref.tensors.items():
        mine = ours.tensors.get(name)
        if mine is None and name == "output.weight":
            mine = ours.tensors["token_embd.weight"]  # we leave a tied classifier out
        if not c.expect(mine is not None, "tensor %s missing" % name):
            continue
        c.expect((mine.shape, mine.type) == (t.shape, t.type), "tensor %s: ours %s %s, ref %s %s"
                 % (name, mine.type_name, mine.shape, t.type_name, t.shape))
        c.expect(bytes(ours.tensor_bytes(mine)) == bytes(ref.tensor_bytes(t)),
                 "tensor %s: data differs" % name)
    extra = set(ours.tensors) - set(ref.tensors)
    c.expect(not extra, "tensors not in the reference: %s" % sorted(extra))
    print("same-as: %d tensors, %d tokens compared" % (len(ref.tensors),
                                                      len(ref.kv["tokenizer.ggml.tokens"])))


def check_greedy(c, path, prompt, n, expected):
    m = LlamaRef(path)
    tok = SPMTokenizer(m.r)
    ids = greedy(m, tok.encode(prompt), n)
    text = tok.decode(ids, after_bos=not prompt)
    c.expect(text == expected, "greedy %r: got %r, expected %r" % (prompt, text, expected))
    print("greedy %r -> %r" % (prompt, text))


# --- Hugging Face BPE, re-implemented from the tokenizer.json semantics ------------------

class HFBPE:
    """The `tokenizers` BPE model for this kind of tokenizer.json: normalize (prepend ▁,
    spaces → ▁), split into characters, apply the lowest-ranked merge first (ties:
    leftmost), unknown characters → byte tokens or unk."""

    def __init__(self, tj):
        m = tj["model"]
        self.vocab = dict(m["vocab"])
        self.ranks = {}
        for r, mg in enumerate(m["merges"]):
            a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
            self.ranks.setdefault((a, b), r)
        self.unk = self.vocab.get(m.get("unk_token"))
        self.bos = None
        for a in tj.get("added_tokens", []):
            self.vocab[a["content"]] = a["id"]

    def encode(self, text):
        if not text:
            return []
        sym = list(("\u2581" + text).replace(" ", "\u2581"))
        nxt = list(range(1, len(sym))) + [-1]
        prv = list(range(-1, len(sym) - 1))
        heap = []

        def push(left):
            if left >= 0 and nxt[left] >= 0:
                r = self.ranks.get((sym[left], sym[nxt[left]]))
                if r is not None:
                    heapq.heappush(heap, (r, left, sym[left], sym[nxt[left]]))

        for k in range(len(sym) - 1):
            push(k)
        while heap:
            _, left, a, b = heapq.heappop(heap)
            right = nxt[left]
            if right < 0 or sym[left] != a or sym[right] != b:
                continue
            sym[left], sym[right] = a + b, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            push(prv[left])
            push(left)
        out, k = [], 0
        while k >= 0:
            if sym[k] in self.vocab:
                out.append(self.vocab[sym[k]])
            else:
                bts = ["<0x%02X>" % x for x in sym[k].encode("utf-8")]
                if all(b in self.vocab for b in bts):
                    out += [self.vocab[b] for b in bts]
                elif not out or out[-1] != self.unk:  # fuse_unk
                    out.append(self.unk)
            k = nxt[k]
        return out


def hf_golden(c, path, hf_dir, golden_path, corpora):
    with open(golden_path, encoding="utf-8") as f:
        golden = json.load(f)
    m = LlamaRef(path)
    tok = SPMTokenizer(m.r)
    for text, want in golden["encode"]:
        got = tok.encode(text)
        c.expect(got == want, "encode %r: ours %s, reference %s" % (text, got, want))
    g = golden["greedy_from_bos"]
    got = greedy(m, g["prompt_ids"], len(g["next_ids"]))
    c.expect(got == g["next_ids"], "greedy ids from BOS: ours %s, golden %s" % (got, g["next_ids"]))
    text = tok.decode(got, after_bos=True)
    c.expect(text.startswith(g["text_starts_with"]), "greedy text %r" % text)
    with open(os.path.join(hf_dir, "tokenizer.json"), encoding="utf-8") as f:
        bpe = HFBPE(json.load(f))
    for text, want in golden["encode"]:  # the re-implementation itself, against the reference
        c.expect([1] + bpe.encode(text) == want, "HF BPE re-implementation: encode %r" % text)
    chars = set("".join(t for t in bpe.vocab if len(t) == 1)) | {" "}
    lines = [text for text, _ in golden["encode"]] + [g["text_starts_with"]]
    for p in corpora:
        with open(p, encoding="utf-8") as f:
            # keep characters this vocabulary has: unknown ones differ only in unk fusing
            lines += ["".join(ch if ch in chars else " " for ch in ln.rstrip("\n")) for ln in f]
    lines = [ln for ln in lines if ln.strip()]
    bad = [ln for ln in lines if tok.encode(ln, add_bos=False) != bpe.encode(ln)]
    for ln in bad[:3]:
        print("  %r: ours %s, BPE %s" % (ln, tok.encode(ln, add_bos=False), bpe.encode(ln)),
              file=sys.stderr)
    c.expect(not bad, "SPM over our scores differs from BPE on %d of %d lines" % (len(bad), len(lines)))
    print("hf-golden: %d encodings, %d greedy ids, %d corpus lines agree with BPE"
          % (len(golden["encode"]), len(got), len(lines) - len(bad)))


def close(c, q_path, f_path, prompt, n, min_words):
    texts = []
    for p in (q_path, f_path):
        m = LlamaRef(p)
        tok = SPMTokenizer(m.r)
        texts.append(tok.decode(greedy(m, tok.encode(prompt), n)))
    a, b = texts[0].split(), texts[1].split()
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    c.expect(k >= min_words, "only %d common leading words: %r vs %r" % (k, texts[0], texts[1]))
    c.expect(all(ch.isprintable() or ch == "\n" for ch in texts[0]), "unprintable: %r" % texts[0])
    print("close: %d common leading words" % k)


def main(argv):
    c = Checker()
    if len(argv) == 3 and argv[0] == "same-as":
        same_as(c, argv[1], argv[2])
    elif len(argv) == 5 and argv[0] == "greedy":
        check_greedy(c, argv[1], argv[2], int(argv[3]), argv[4])
    elif len(argv) >= 4 and argv[0] == "hf-golden":
        hf_golden(c, argv[1], argv[2], argv[3], argv[4:])
    elif len(argv) == 6 and argv[0] == "close":
        close(c, argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
