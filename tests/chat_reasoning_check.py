#!/usr/bin/python3
"""tests/chat_reasoning_check.py QUILL MODEL — a chat's history with a reasoning model, against jinja2.

A grammar makes the model think and answer ("<think>reasoning</think>answer.")
in a three-turn `quill -i` chat with a real chat template from
SHARED/templates: two turns and /save, then in a new chat /load and the third
turn, and the chat's KV cache saved again (/save). The third turn's
prompt must be exactly jinja2's rendering (set up as transformers renders,
tests/template_ref.py) of the conversation as an OpenAI-style client sends it:
each earlier answer as the assistant's "content" (the answer alone, as printed
on stdout) with its thinking (as shown on stderr by --reasoning show) in
"reasoning_content", so that the template decides what the next turn sees.
Checked on the saved token ids (tests/pcache_file.py reads them) and the
turn's prompt-token count, with the rendering tokenized by `quill tokenize`.
Templates: Qwen3 (drops earlier thinking), GLM-4.7 with clear_thinking=false
(keeps it), Qwen3-Coder (reads no reasoning field: the answer alone).
Exits 1 on a mismatch.
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcache_file  # noqa: E402
from template_ref import make_env  # noqa: E402

QUILL, MODEL = sys.argv[1], sys.argv[2]
SHARED = os.environ.get("SHARED", "../shared")
USERS = ["Hi", "Tell me more", "And then?"]
# (template, variables, whether the template shows earlier turns' thinking again)
CASES = [("Qwen-Qwen3-0.6B", {}, False), ("GLM-4.7-Flash", {"clear_thinking": False}, True),
         ("Qwen3-Coder", {}, False)]


def render(template, messages, variables):
    env = make_env()
    return env.from_string(template).render(messages=messages, tools=None, documents=None,
                                            add_generation_prompt=True, bos_token="<s>", eos_token="</s>",
                                            **variables)


def tokenize(text):
    r = subprocess.run([QUILL, "tokenize", "-m", MODEL, "--ids", "--special", text], capture_output=True, check=True)
    return [int(x) for x in r.stdout.split()]


def saved_ids(path):
    """The token ids of a saved KV cache (after pcache_file.py's checks), or the reason it is not whole."""
    why = pcache_file.check(path, quiet=True)
    if why:
        return why
    b = open(path, "rb").read()
    n = pcache_file.fields(b)["n_tokens"]
    return list(struct.unpack("<%di" % n, b[pcache_file.HEADER:pcache_file.HEADER + 4 * n]))


def check_case(name, variables, keeps, tmp):
    template = open(f"{SHARED}/templates/{name}.jinja").read()
    # a template whose generation prompt opens the thinking gets a grammar that only closes it
    opens = render(template, [{"role": "user", "content": "x"}], variables).rstrip("\n").endswith("<think>")
    grammar = f"{tmp}/r.gbnf"
    with open(grammar, "w") as f:
        f.write('root ::= %s[a-z ]{1,12} "</think>" [A-Z] [A-Za-z ]{1,12} "."\n' % ("" if opens else '"<think>" '))
    args = [QUILL, "-m", MODEL, "-i", "-t", "1", "-n", "40", "--temp", "0", "--reasoning", "show",
            "--chat-template", f"{SHARED}/templates/{name}.jinja", "--grammar", grammar]
    for k, v in variables.items():
        args += ["--var", f"{k}={json.dumps(v)}"]
    # two turns, /save; then a new chat: /load (the messages with their reasoning), the third turn, /save
    runs = [("\n".join(USERS[:2]) + f"\n/save {tmp}/conv\n"), (f"/load {tmp}/conv\n{USERS[2]}\n/save {tmp}/conv2\n")]
    out = err = ""
    for text in runs:
        r = subprocess.run(args, input=text.encode(), capture_output=True)
        if r.returncode:
            return [f"{name}: exit {r.returncode}: {r.stderr.decode()[-300:]}"]
        out, err = out + r.stdout.decode(), err + r.stderr.decode()
    answers = out.split("\n")[:-1]
    thoughts = [line for line in err.split("\n") if line and not line.startswith("quill: ")]
    prompts = re.findall(r"prompt (\d+) tok \((\d+) reused\)", err)
    if len(answers) != 3 or len(thoughts) != 3 or len(prompts) != 3:
        return [f"{name}: expected 3 answers, thoughts and stats lines: {out!r} {err!r}"]
    messages = []
    for user, answer, thought in zip(USERS, answers, thoughts):
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": answer, "reasoning_content": thought})
    want = tokenize(render(template, messages[:-1], variables))
    ids = saved_ids(f"{tmp}/conv2")
    if isinstance(ids, str):
        return [f"{name}: the saved cache: {ids}"]
    fails = []
    n3 = int(prompts[2][0]) + int(prompts[2][1])
    if n3 != len(want):
        fails.append(f"{name}: turn 3's prompt is {n3} tokens, jinja2's rendering {len(want)}")
    if ids[:len(want)] != want:
        k = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
        fails.append(f"{name}: the cached tokens differ from jinja2's rendering at token {k} of {len(want)}")
    bare = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in messages[:-1]]
    kept = render(template, messages[:-1], variables) != render(template, bare, variables)
    if kept != keeps:
        fails.append(f"{name}: jinja2 {'keeps' if kept else 'drops'} the earlier thinking: not the case tested")
    print(f"{name} {variables}: turn 3's prompt ({len(want)} tokens) is jinja2's rendering; "
          f"earlier thinking {'kept' if kept else 'dropped'} by the template")
    return fails


def main():
    fails = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, variables, keeps in CASES:
            fails += check_case(name, variables, keeps, tmp)
    for f in fails:
        print("FAIL", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
