#!/usr/bin/env python3
"""tests/batch_check.py — writes batch inputs and checks `quill batch` output
against `quill` run on each prompt alone (greedy).

  batch_check.py write-mix OUT.jsonl        prompts of mixed lengths, n, stops and shared prefixes
  batch_check.py alone QUILL MODEL IN.jsonl OUT.jsonl [quill args]
                                            runs each record alone, writes the expected records
  batch_check.py same EXPECTED.jsonl GOT.jsonl [--any-order]
                                            every expected record (id, text, tokens,
                                            finish_reason, prompt_tokens) appears in GOT
  batch_check.py write-openai OUT.jsonl N   N OpenAI Batch requests, completions and chats
  batch_check.py alone-openai QUILL MODEL IN.jsonl OUT.jsonl
                                            runs each request alone (a chat rendered by
                                            `quill template`), writes the expected records
  batch_check.py same-openai EXPECTED.jsonl GOT.jsonl
                                            GOT holds each custom_id once, each response as
                                            expected (text, tokens, finish_reason, prompt tokens)
  batch_check.py shard-of ID N              FNV-1a 64 of the id's UTF-8 bytes, mod N
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


def write_openai(path, n):
    with open(path, "w") as f:
        for i in range(n):
            body = {"model": "any", "max_tokens": 20 + (i * 7) % 41, "temperature": 0}
            if i % 5 == 4:
                url = "/v1/chat/completions"
                body["messages"] = [{"role": "user", "content": text_of(i, 2 + i % 6)}]
            else:
                url = "/v1/completions"
                body["prompt"] = "Once upon a time " + text_of(i, 1 + i % 9)
            if i % 7 == 3:
                body["stop"] = ["."]
            f.write(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url, "body": body}) + "\n")


def alone_openai(quill, model, inp, out):
    with open(inp) as f, open(out, "w") as g:
        for line in f:
            r = json.loads(line)
            b = r["body"]
            args = [quill, "-m", model, "--temp", "0", "-n", str(b["max_tokens"]), "--stats-json", "/dev/stdout", "-q"]
            for s in b.get("stop", []):
                args += ["--stop", s]
            if r["url"] == "/v1/chat/completions":  # the conversation as the chat template renders it
                conv = json.dumps({"messages": b["messages"]}).encode()
                prompt = subprocess.run([quill, "template", "-m", model], input=conv, capture_output=True,
                                        check=True).stdout.decode()
                args += ["--special", "--stop", "\nUser:"]  # the plain format's end of turn
            else:
                prompt = b["prompt"]
            p = subprocess.run(args + ["--", prompt], capture_output=True, check=True)
            text, _, stats = p.stdout.rpartition(b"{")
            st = json.loads(b"{" + stats)
            g.write(json.dumps({"custom_id": r["custom_id"], "text": lossy(text), "tokens": st["generated_tokens"],
                                "finish_reason": "stop" if st["finish_reason"] in ("eos", "stop") else "length",
                                "prompt_tokens": st["prompt_tokens"]}) + "\n")


def same_openai(expected, got):
    want = {w["custom_id"]: w for w in map(json.loads, open(expected))}
    have = [json.loads(l) for l in open(got)]
    ids = [h["custom_id"] for h in have]
    bad = 0
    if sorted(ids) != sorted(want):
        print(f"{len(ids)} records, {len(set(ids))} ids; expected {len(want)} once each")
        bad += 1
    for h in have:
        w = want.get(h["custom_id"])
        resp = h.get("response") or {}
        body = resp.get("body") or {}
        ch = (body.get("choices") or [{}])[0]
        text = ch["message"]["content"] if "message" in ch else ch.get("text")
        usage = body.get("usage", {})
        got_ = {"custom_id": h["custom_id"], "text": text, "tokens": usage.get("completion_tokens"),
                "finish_reason": ch.get("finish_reason"), "prompt_tokens": usage.get("prompt_tokens")}
        if w is None or got_ != w or resp.get("status_code") != 200 or h.get("error") is not None:
            print("differs:", w, "got", h)
            bad += 1
    return 1 if bad else 0


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write-mix":
        write_mix(sys.argv[2])
    elif cmd == "alone":
        alone(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
    elif cmd == "same":
        sys.exit(same(sys.argv[2], sys.argv[3], "--any-order" in sys.argv))
    elif cmd == "write-openai":
        write_openai(sys.argv[2], int(sys.argv[3]))
    elif cmd == "alone-openai":
        alone_openai(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif cmd == "same-openai":
        sys.exit(same_openai(sys.argv[2], sys.argv[3]))
    elif cmd == "shard-of":
        print(fnv1a64(sys.argv[2].encode()) % int(sys.argv[3]))
    else:
        sys.exit(__doc__)
