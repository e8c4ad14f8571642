#!/usr/bin/python3
"""tests/logprobs_check.py QUILL MODEL [DRAFT] — quill's --logprobs against a float64 reference.

Runs quill (greedy, and sampled with a repetition penalty) with --logprobs 5
--output-format json, then recomputes every generated position's logits with
models/npllama.py's float64 forward pass over the same tokens (the prompt
tokenized by npllama's own SentencePiece encoder), applies llama.cpp's
repetition penalty to them, and checks each token's log-probability and its
top-5 alternatives. Prints the largest difference; exits 1 on a mismatch.
With DRAFT, the runs sample with --draft DRAFT instead (speculative decoding:
the rows come from the verification passes).
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from npllama import LlamaRef, SPMTokenizer  # noqa: E402

QUILL, MODEL = sys.argv[1], sys.argv[2]
SPEC = ["--draft", sys.argv[3]] if len(sys.argv) > 3 else []
# nats: quill runs float32 with an fp16 KV cache and 8-bit activations. Largest
# seen: 0.012 greedy, 0.021 at a sampled run's low-probability alternatives
# (logprob -6.6); a wrong softmax, penalty or row is off by 0.1 and more.
TOL = 0.03


def penalized(logits, history, penalty, last_n):
    out = logits.copy()
    for t in set(history[-last_n:] if last_n else []):
        out[t] = out[t] / penalty if out[t] > 0 else out[t] * penalty
    return out


def main():
    ref = LlamaRef(MODEL)
    tok = SPMTokenizer(ref.r)
    worst, fails, checked = 0.0, [], 0
    runs = [("The little dog", ["--temp", "0.9", "--seed", "5", "--repeat-penalty", "1.3"], 1.3),
            ("Lily", ["--temp", "1.5", "--seed", "2", "--top-k", "0"], 1.0)]
    if not SPEC:
        runs.insert(0, ("Once upon a time", ["--temp", "0"], 1.0))
    for prompt, args, penalty in runs:
        r = subprocess.run([QUILL, "-q", "-m", MODEL, "-n", "16", "--logprobs", "5", "--output-format", "json",
                            *SPEC, *args, prompt], capture_output=True, check=True)
        out = json.loads(r.stdout)
        content = out["logprobs"]["content"]
        ids = tok.encode(prompt)
        if out["prompt_tokens"] != len(ids):
            fails.append(f"{prompt!r}: quill has {out['prompt_tokens']} prompt tokens, the reference {len(ids)}")
            continue
        gen = [c["id"] for c in content]
        ref.reset()
        logits = ref.forward(ids + gen)  # [n, vocab], row i predicts token i + 1
        for j, c in enumerate(content):
            hist = ids + gen[:j]
            lg = penalized(logits[len(ids) + j - 1], hist, penalty, 64)
            lp = lg - (lg.max() + np.log(np.exp(lg - lg.max()).sum()))
            d = abs(lp[c["id"]] - c["logprob"])
            worst = max(worst, d)
            checked += 1
            if d > TOL:
                fails.append(f"{prompt!r} token {j} ({c['token']!r}): logprob {c['logprob']} vs reference {lp[c['id']]}")
            best = np.sort(lp)[::-1][:5]
            for k, alt in enumerate(c["top_logprobs"]):
                d = max(abs(lp[alt["id"]] - alt["logprob"]), abs(best[k] - alt["logprob"]))
                worst = max(worst, d)
                if d > TOL:
                    fails.append(f"{prompt!r} token {j} alternative {k} ({alt['token']!r}): {alt['logprob']} vs "
                                 f"reference {lp[alt['id']]} (reference's rank-{k} value {best[k]})")
    print(f"logprobs: {checked} tokens x (1 + 5 alternatives) checked, largest difference {worst:.2e} nats")
    for f in fails[:10]:
        print("FAIL", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
