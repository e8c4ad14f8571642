"""Checks quill against the outputs of independent implementations in ../shared/golden.

usage: golden.py QUILL SHARED {continuations|bos200|ppl}   (QUILL_ARGS: extra quill options)
Prints one line per case and exits non-zero if any case fails.
"""
import json
import math
import os
import subprocess
import sys


# QUILL_ARGS: extra options for every quill run (make test-cuda passes --gpu).
EXTRA_ARGS = os.environ.get("QUILL_ARGS", "").split()


def run(cmd):
    p = subprocess.run(cmd + EXTRA_ARGS, capture_output=True)
    if p.returncode != 0:
        raise RuntimeError("exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()[-400:]))
    return p.stdout.decode("utf-8")


def continuations(quill, shared):
    fails = 0
    # GOLDEN_MODELS="a.gguf b.gguf": only those models' rows (each must have some)
    only = os.environ.get("GOLDEN_MODELS", "").split()
    seen = set()
    for name in ("stories.tsv", "synth.tsv"):
        for line in open(os.path.join(shared, "golden", name), encoding="utf-8"):
            model, prompt, n, want = line.rstrip("\n").split("\t")
            if only and model not in only:
                continue
            seen.add(model)
            want = json.loads(want)
            path = os.path.join(shared, "models", "gguf", model)
            try:
                got = run([quill, "-m", path, "--temp", "0", "-n", n, "-q", prompt])
            except RuntimeError as e:
                got = "<%s>" % e
            ok = got == want
            fails += not ok
            print("%s %s %r" % ("ok  " if ok else "FAIL", model, prompt))
            if not ok:
                print("     want %r\n     got  %r" % (want, got))
    for model in sorted(set(only) - seen):
        print("FAIL %s: no golden continuation names it" % model)
        fails += 1
    return fails


def bos200(quill, shared):
    # llama2.c's `run -n 200` forwards positions 0..199 (BOS first) and prints the
    # token sampled at each of them: 200 generated tokens. The file's own context
    # length is 128, so the context is raised as llama2.c's 512-token model allows.
    want = open(os.path.join(shared, "golden", "stories260K-bos-200.txt"), encoding="utf-8").read()
    got = run([quill, "-m", os.path.join(shared, "models", "gguf", "stories260K.gguf"),
               "--temp", "0", "-n", "200", "-c", "512", "-q", ""])
    print("%s stories260K greedy from BOS, 200 tokens" % ("ok  " if got == want else "FAIL"))
    if got != want:
        print("     want %r\n     got  %r" % (want, got))
    return got != want


def ppl(quill, shared):
    fails = 0
    text = os.path.join(shared, "golden", "gpl-3.txt")
    for line in open(os.path.join(shared, "golden", "ppl.tsv")):
        model, _, ctx, want = line.split("\t")
        out = run([quill, "ppl", "-m", os.path.join(shared, "models", "gguf", model), "-f", text,
                   "-c", ctx, "-q"])
        got = float(out.split()[2])  # "PPL = x +/- e"
        rel = abs(got - float(want)) / float(want)
        ok = rel < 0.01
        fails += not ok
        print("%s %s ppl %.4f, llama.cpp %.4f (%.3f%%)" % ("ok  " if ok else "FAIL", model, got,
                                                          float(want), 100 * rel))
    return fails


if __name__ == "__main__":
    quill, shared, what = sys.argv[1:4]
    sys.exit(1 if {"continuations": continuations, "bos200": bos200, "ppl": ppl}[what](quill, shared) else 0)
