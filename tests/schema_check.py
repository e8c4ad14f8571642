#!/usr/bin/python3
"""tests/schema_check.py QUILL SHARED — constrained decoding against independent oracles.

Runs quill with --json-schema over many schemas x prompts x seeds (greedy and
sampled) on a 512-token and a 32000-token vocabulary, and validates every
output with python3-jsonschema; runs the shipped GBNF grammars and checks
their outputs with json.loads or a Python regex of the same language. Every
run must end with finish_reason "stop" or "eos" (the grammar complete) except
where a grammar is unbounded, whose outputs must then be a prefix. oneOf: every
pair of a pool of branches either generates values that match exactly one
branch (python3-jsonschema's oneOf) or is refused at compile time with the
one-line "overlapping branches" error, and then some value (one of the outputs,
or a few plain ones) matches both branches: the refusal was needed. Prints the counts; exits 1 on any failure.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

QUILL, SHARED = sys.argv[1], sys.argv[2]
MODELS = [f"{SHARED}/models/gguf/stories260K.gguf", f"{SHARED}/models/gguf/synth-llama-Q8_0.gguf"]
PROMPTS = ["Once upon a time", "The answer is", ""]
MODES = [["--temp", "0"], ["--temp", "0.9", "--seed", "1"], ["--temp", "1.2", "--seed", "7", "--top-k", "0", "--top-p", "1"],
         ["--temp", "0.7", "--seed", "3", "--repeat-penalty", "1.3"]]
if os.environ.get("QUILL_SANITIZED") == "1":  # the ASan build: a fifth of the runs, every schema
    PROMPTS, MODES = PROMPTS[:1], MODES[:2]

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 1, "maxItems": 4},
    {"enum": ["red", "green", "blue", 1, None, {"k": "v"}]},
    {"type": "object", "properties": {"ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                                               "maxItems": 3}},
     "required": ["ok"], "additionalProperties": False},
    {"type": "string", "pattern": "^[A-Z][a-z]{2,5}-[0-9]{3}$"},
    {"type": "string", "pattern": "^(ab|cd)+x?\\.\\d{2}$"},
    {"anyOf": [{"type": "integer", "exclusiveMinimum": 10, "maximum": 1000},
               {"type": "string", "minLength": 1, "maxLength": 4}]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number", "minimum": -1.5, "maximum": 2.5},
                                                       "y": {"type": "number", "minimum": 0, "maximum": 100}},
                      "required": ["x", "y"]}},
     "type": "array", "items": {"$ref": "#/$defs/pt"}, "maxItems": 3},
    {"const": {"a": [1, 2], "b": "q\"uote"}},
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": 100000, "maximum": 999999},
                                      "v": {"type": ["string", "null"], "maxLength": 3}}, "required": ["id"]},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1, "maximum": 9}, "b": {"type": "boolean"},
                                      "c": {"const": "x"}}},
    {"type": "integer", "minimum": -123, "maximum": 4567},
    {"type": "integer", "exclusiveMinimum": -7, "exclusiveMaximum": 7},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number", "minimum": -2.25, "maximum": -0.5},
    {"type": "array", "items": {"type": "number"}, "maxItems": 2},
    {"oneOf": [{"type": "boolean"}, {"type": "null"}, {"type": "string", "maxLength": 2}]},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"},
                                                 "r": {"type": "number", "minimum": 0, "maximum": 10}},
                "required": ["kind", "r"]},
               {"type": "object", "properties": {"kind": {"const": "square"},
                                                 "side": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["kind", "side"]}]},
    {"oneOf": [{"enum": ["a", "b", True]}, {"const": "c"}, {"type": "integer", "minimum": 10, "maximum": 20}]},
    {"type": "array", "maxItems": 3, "items": {"oneOf": [
        {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 5}}, "required": ["x"],
         "additionalProperties": False},
        {"type": "object", "properties": {"y": {"type": "string", "maxLength": 4}}, "required": ["y"],
         "additionalProperties": False}]}},
    {"definitions": {"c": {"enum": ["x", "y"]}}, "type": "object",
     "properties": {"first": {"$ref": "#/definitions/c"}, "second": {"$ref": "#/definitions/c"}},
     "required": ["first", "second"]},
    {"type": "string", "minLength": 3, "maxLength": 6},
    {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 2},
    {"type": "string", "pattern": "^[^a-z\"\\\\]{2,4}$"},
    {"type": "object", "properties": {"big": {"type": "integer", "minimum": 1000000000000}},
     "required": ["big"], "additionalProperties": False},
]

# the shipped GBNF grammars and an independent check of their language
GRAMMARS = {
    "json": lambda t, done: isinstance(json.loads(t), dict),
    "json_arr": lambda t, done: isinstance(json.loads(t), list),
    "list": lambda t, done: re.fullmatch(r"(- [^\r\n\x0b\x0c\x85\u2028\u2029]+\n)+" if done else
                                         r"(- [^\r\n\x0b\x0c\x85\u2028\u2029]+\n)*(- [^\r\n\x0b\x0c\x85\u2028\u2029]*)?",
                                         t) is not None,
    "english": lambda t, done: re.fullmatch(r"[a-zA-Z0-9!-/:-@\[-`{-~]+([ \t\n][a-zA-Z0-9!-/:-@\[-`{-~]+)*" +
                                            ("" if done else r"[ \t\n]?"), t) is not None,
    "chess": lambda t, done: re.fullmatch(
        r"1\. (M) (M)\n([1-9][0-9]?\. (M) (M)\n)+".replace("M", r"(([a-h]x)?[a-h][1-8](=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?"
                                                              r"[a-h][1-8]|O-O(-O)?)[+#]?"), t) is not None or not done,
}


def run(model, extra, prompt, n):
    with tempfile.NamedTemporaryFile(suffix=".json") as st:
        r = subprocess.run([QUILL, "-m", model, "-n", str(n), "--stats-json", st.name, *extra, prompt],
                           capture_output=True, timeout=120)
        stats = json.load(open(st.name)) if r.returncode == 0 else {}
    return r, stats


# oneOf: branches combined in pairs; "#/$defs/d" is one of them
ONEOF_DEFS = {"d": {"type": "object", "properties": {"k": {"const": "s"}, "n": {"type": "null"}},
                    "required": ["k", "n"]}}
ONEOF_POOL = [
    {"type": "integer", "minimum": 0, "maximum": 99},
    {"type": "number", "minimum": -1, "maximum": 1},
    {"type": "string", "maxLength": 4},
    {"enum": ["a", "b", 1]},
    {"const": "a"},
    {"const": None},
    {"type": "null"},
    {"type": "boolean"},
    {"enum": [True]},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 2},
    {"type": "object", "properties": {"k": {"const": "p"}, "v": {"type": "integer", "minimum": 0, "maximum": 9}},
     "required": ["k", "v"]},
    {"type": "object", "properties": {"k": {"const": "q"}}, "required": ["k"]},
    {"type": "object", "properties": {"k": {"enum": ["p", "r"]}}, "required": ["k"]},
    {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"], "additionalProperties": False},
    {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9}}},
    {"properties": {"y": {"type": "null"}}, "required": ["y"]},
    {"$ref": "#/$defs/d"},
]


def matches(value, branch):
    return jsonschema.Draft202012Validator({"$defs": ONEOF_DEFS, "allOf": [branch]}).is_valid(value)


def check_oneof_pairs(model, counts, fails):
    seeds = ["1"] if os.environ.get("QUILL_SANITIZED") == "1" else ["1", "2"]
    witnesses = [0, 1, 0.5, "a", "", None, True, False, [], {}, {"k": "p"}, {"k": "p", "v": 0}, {"x": True}]
    refused = []
    for i, a in enumerate(ONEOF_POOL):
        for j, b in enumerate(ONEOF_POOL[i + 1:], i + 1):
            schema = {"$defs": ONEOF_DEFS, "oneOf": [a, b]}
            for seed in seeds:
                r, st = run(model, ["--json-schema", json.dumps(schema), "--temp", "1", "--seed", seed], "Once", 200)
                tag = f"oneOf pair {i},{j} seed {seed}"
                err = r.stderr.decode()
                if r.returncode != 0:
                    if r.returncode == 1 and err.count("\n") == 1 and "oneOf with overlapping branches" in err:
                        counts["oneof_refused"] += 1
                        refused.append((i, j))
                        break  # refused at compile time: no seed generates
                    fails.append(f"{tag}: exit {r.returncode}: {err[-300:]}")
                    break
                text = r.stdout.decode("utf-8", "replace")
                try:
                    if st.get("finish_reason") not in ("stop", "eos"):
                        raise ValueError(f"finish {st.get('finish_reason')}")
                    witnesses.append(json.loads(text))
                    jsonschema.validate(witnesses[-1], schema)
                    counts["oneof_valid"] += 1
                except Exception as e:  # noqa: BLE001 - any failure is reported
                    fails.append(f"{tag}: {text!r} does not validate: {str(e)[:200]}")
    for i, j in refused:
        if not any(matches(w, ONEOF_POOL[i]) and matches(w, ONEOF_POOL[j]) for w in witnesses):
            fails.append(f"oneOf pair {i},{j} refused, but no value found that matches both branches")
    if not counts["oneof_valid"] or not counts["oneof_refused"]:
        fails.append(f"oneOf pairs: {counts['oneof_valid']} outputs, {counts['oneof_refused']} refused: "
                     "expected both kinds")


def main():
    counts = {"valid": 0, "invalid": 0, "length": 0, "greedy": 0, "sampled": 0, "oneof_valid": 0, "oneof_refused": 0}
    fails = []
    check_oneof_pairs(MODELS[0], counts, fails)
    for model in MODELS:
        for si, schema in enumerate(SCHEMAS):
            for prompt in PROMPTS:
                for mode in MODES:
                    r, st = run(model, ["--json-schema", json.dumps(schema), *mode], prompt, 400)
                    tag = f"{os.path.basename(model)} schema {si} {mode} {prompt!r}"
                    if r.returncode != 0:
                        fails.append(f"{tag}: exit {r.returncode}: {r.stderr.decode()[-300:]}")
                        continue
                    counts["greedy" if mode[1] == "0" else "sampled"] += 1
                    text = r.stdout.decode("utf-8", "replace")
                    if st.get("finish_reason") not in ("stop", "eos"):
                        counts["length"] += 1
                        fails.append(f"{tag}: finish {st.get('finish_reason')}: {text[:200]!r}")
                        continue
                    try:
                        jsonschema.validate(json.loads(text), schema)
                        counts["valid"] += 1
                    except Exception as e:  # noqa: BLE001 - any failure is reported
                        counts["invalid"] += 1
                        fails.append(f"{tag}: {text!r} does not validate: {str(e)[:200]}")
        for name, check in GRAMMARS.items():
            for prompt in PROMPTS[:2]:
                for mode in MODES[:3]:
                    r, st = run(model, ["--grammar", f"{SHARED}/grammars/{name}.gbnf", *mode], prompt, 120)
                    tag = f"{os.path.basename(model)} {name}.gbnf {mode} {prompt!r}"
                    if r.returncode != 0:
                        fails.append(f"{tag}: exit {r.returncode}: {r.stderr.decode()[-300:]}")
                        continue
                    text = r.stdout.decode("utf-8")
                    done = st.get("grammar_complete") and st.get("finish_reason") in ("stop", "eos")
                    if not done and name.startswith("json"):  # no independent prefix oracle for JSON
                        counts["grammar_prefix_unchecked"] = counts.get("grammar_prefix_unchecked", 0) + 1
                        continue
                    try:
                        ok = check(text, done)
                    except ValueError:
                        ok = False
                    counts["grammar_ok" if ok else "grammar_bad"] = counts.get("grammar_ok" if ok else "grammar_bad", 0) + 1
                    if not ok:
                        fails.append(f"{tag}: {text!r} is not in the language (complete: {done})")
    print(json.dumps(counts))
    for f in fails[:20]:
        print("FAIL", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
