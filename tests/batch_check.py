#!/usr/bin/env python3
"""tests/batch_check.py — writes batch inputs and checks `quill batch` output
against `quill` run on each prompt alone (greedy).

  batch_check.py write-mix OUT.jsonl        prompts of mixed lengths, n, stops and shared prefixes
  batch_check.py alone QUILL MODEL IN.jsonl OUT.jsonl [quill args]
                                            runs each record alone, writes the expected records
  batch_check.py same EXPECTED.jsonl GOT.jsonl [--any-order]
                                            every expected record (id, text, tokens,
                                            finish_reason, prompt_tokens) appears in GOT
"""
import json
import subprocess
import sys

WORDS = ("the cat sat on a mat and then a little girl named Lily went to the park with her dog "
         "to play in the sun until her mom called her home for dinner").split()


def text_of(seed, n_words):
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n_words))


def write_mix(path):
    # a long common "system prompt" (> 2 prefill tiles of 64 tokens) shared by several records
    system = "Once upon a time, " + text_of(1, 150) + ". "
    recs = []
    for i in range(14):
        r = {"id": f"r{i}"}
        if i % 3 == 0:
            r["prompt"] = system + text_of(i, 3 + i)
        elif i % 3 == 1:
            r["prompt"] = text_of(i, 1 + i * 5)
        else:
            r["prompt"] = "Tom and " + text_of(i, 2)
        r["n"] = [5, 17, 40, 1, 33][i % 5]
        if i % 4 == 1:
            r["stop"] = ["."] if i % 8 == 1 else [" the", "!"]
        recs.append(r)
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def lossy(b):
    """b as text, each byte that is not part of valid UTF-8 replaced by U+FFFD (as
    quill batch writes its JSON strings)."""
    out = []
    while b:
        try:
            out.append(b.decode())
            break
        except UnicodeDecodeError as e:
            out += [b[:e.start].decode(), "\ufffd"]
            b = b[e.start + 1:]
    return "".join(out)


def alone(quill, model, inp, out, extra):
    with open(inp) as f, open(out, "w") as g:
        for line in f:
            r = json.loads(line)
            args = [quill, "-m", model, "--temp", "0", "-n", str(r["n"]), "--stats-json", "/dev/stdout",
                    "-q"] + extra
            for s in r.get("stop", []):
                args += ["--stop", s]
            p = subprocess.run(args + ["--", r["prompt"]], capture_output=True, check=True)
            # stdout: the text, then the stats JSON line (written to /dev/stdout at exit)
            text, _, stats = p.stdout.rpartition(b"{")
            st = json.loads(b"{" + stats)
            g.write(json.dumps({"id": r["id"], "text": lossy(text), "tokens": st["generated_tokens"],
                                "finish_reason": st["finish_reason"],
                                "prompt_tokens": st["prompt_tokens"]}) + "\n")


def same(expected, got, any_order):
    want = [json.loads(l) for l in open(expected)]
    have = [json.loads(l) for l in open(got)]
    keys = ("id", "text", "tokens", "finish_reason", "prompt_tokens")
    if not any_order and [h.get("id") for h in have] != [w["id"] for w in want]:
        print("order differs:", [h.get("id") for h in have])
        return 1
    by_id = {h.get("id"): h for h in have}
    bad = 0
    for w in want:
        h = by_id.get(w["id"])
        if h is None or any(h.get(k) != w[k] for k in keys):
            print("differs:", w, "got", h)
            bad += 1
    if len(have) != len(want):
        print(f"{len(have)} records, expected {len(want)}")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write-mix":
        write_mix(sys.argv[2])
    elif cmd == "alone":
        alone(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
    elif cmd == "same":
        sys.exit(same(sys.argv[2], sys.argv[3], "--any-order" in sys.argv))
    else:
        sys.exit(__doc__)
