"""template_ref.py — quill's Jinja engine (jinja.c) against jinja2, on real chat templates.

    /usr/bin/python3 tests/template_ref.py BUILD SHARED [TEMPLATE...]

jinja2 is set up as Hugging Face transformers renders chat templates
(transformers' chat_template_utils): an ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, the loopcontrols extension and the {% generation %}
tag, its tojson (json.dumps with ensure_ascii, indent, separators and sort_keys),
raise_exception and strftime_now; the variables are messages, tools (None when
none are given), documents (None), add_generation_prompt, bos_token and
eos_token, plus a conversation's own "vars". strftime_now reads the clock from
SOURCE_DATE_EPOCH, as quill does, so both sides print the same date.

Every template in SHARED/templates (or the ones named) renders every
conversation of tests/template_convs.json with and without the generation
prompt, through jinja2 here and through BUILD/tests/test_template (quill's
engine) in one process per template. A template is exact when each rendering
is byte-identical, and each one jinja2 refuses (raise_exception, an undefined
name, a sandbox refusal) quill refuses too. A template whose every rendering
jinja2 refuses is "not renderable by jinja2". The built-in formats
(--chat-template NAME) are checked the same way.
"""
import datetime
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
from jinja2 import nodes  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

BOS, EOS = "<|bos|>", "<|eos|>"


class Generation(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"])).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def jinja_renderings(env, text, convs):
    """[{"text": ...} or {"error": ...}] for each conversation, generation prompt on then off."""
    try:
        tpl = env.from_string(text)
    except Exception as e:  # noqa: BLE001 - any refusal counts
        return [{"error": "%s: %s" % (type(e).__name__, e)}] * (2 * len(convs))
    out = []
    for c in convs:
        for gen in (True, False):
            ctx = {"messages": c["messages"], "tools": c.get("tools"), "documents": None,
                   "add_generation_prompt": gen, "bos_token": BOS, "eos_token": EOS, **c.get("vars", {})}
            try:
                out.append({"text": tpl.render(**ctx)})
            except Exception as e:  # noqa: BLE001
                out.append({"error": "%s: %s" % (type(e).__name__, e)})
    return out


def quill_renderings(build, args):
    prog = os.path.join(build, "tests", "test_template")
    r = subprocess.run([prog, *args], capture_output=True)
    if r.returncode != 0:
        return None, r.stderr.decode(errors="replace").strip()
    return json.loads(r.stdout), None


def compare(what, convs, want, got):
    """Returns (ok, message)."""
    for i, (w, g) in enumerate(zip(want, got)):
        label = "%s, %s, generation prompt %s" % (what, convs[i // 2]["name"], "on" if i % 2 == 0 else "off")
        if "error" in w and "error" not in g:
            return False, "%s: jinja2 refuses (%s) but quill renders %r" % (label, w["error"], g["text"][:300])
        if "error" in g and "error" not in w:
            return False, "%s: quill refuses (%s)" % (label, g["error"])
        if "text" in w and w["text"] != g["text"]:
            k = next((j for j in range(min(len(w["text"]), len(g["text"]))) if w["text"][j] != g["text"][j]),
                     min(len(w["text"]), len(g["text"])))
            return False, "%s: differs at character %d\n  jinja2: %r\n  quill:  %r" % (
                label, k, w["text"][max(0, k - 60):k + 60], g["text"][max(0, k - 60):k + 60])
    return True, ""


def main():
    build, shared = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    convs_path = os.path.join(here, "template_convs.json")
    with open(convs_path, encoding="utf-8") as f:
        convs = json.load(f)
    os.environ.setdefault("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01 00:00:00 UTC
    os.environ.setdefault("TZ", "UTC")
    env = make_env()
    tdir = os.path.join(shared, "templates")
    names = sys.argv[3:] or sorted(n for n in os.listdir(tdir) if n.endswith(".jinja"))
    exact, differ, unrenderable = [], [], []
    for name in names:
        path = os.path.join(tdir, name)
        with open(path, encoding="utf-8") as f:
            want = jinja_renderings(env, f.read(), convs)
        got, err = quill_renderings(build, ["render", path, convs_path, BOS, EOS])
        if got is None:
            differ.append(name)
            print("FAIL %s: test_template failed: %s" % (name, err))
            continue
        ok, msg = compare(name, convs, want, got)
        if all("error" in w for w in want):
            unrenderable.append(name)
            print("%s %s: jinja2 renders none of the conversations (%s)" % ("ok  " if ok else "FAIL", name,
                                                                         want[0]["error"]))
        elif ok:
            exact.append(name)
            refused = sum("error" in w for w in want)
            print("ok   %s%s" % (name, " (%d of %d refused by both)" % (refused, len(want)) if refused else ""))
        if not ok:
            differ.append(name)
            print("FAIL " + msg)
    # small templates for the features the real ones use rarely
    from template_features import FEATURES
    tmp = os.path.join(build, "tests", "template_feature.jinja")
    for label, text in FEATURES.items():
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        want = jinja_renderings(env, text, convs)
        got, err = quill_renderings(build, ["render", tmp, convs_path, BOS, EOS])
        ok, msg = (False, err) if got is None else compare("feature '%s'" % label, convs, want, got)
        print(("ok   feature '%s'" % label) if ok else "FAIL " + msg)
        if not ok:
            differ.append("feature " + label)
    os.remove(tmp)
    # the built-in formats: quill's own Jinja sources, rendered by both
    families, err = quill_renderings(build, ["families"])
    if families is None:
        print("FAIL test_template families: %s" % err)
        differ.append("families")
        families = []
    for fam in families:
        want = jinja_renderings(env, fam["source"], convs)
        got, err = quill_renderings(build, ["render-family", fam["name"], convs_path, BOS, EOS])
        ok, msg = (False, err) if got is None else compare("--chat-template " + fam["name"], convs, want, got)
        print(("ok   --chat-template %s" % fam["name"]) if ok else "FAIL " + msg)
        if not ok:
            differ.append("family " + fam["name"])
    total = len(names)
    print("template_ref: %d of %d templates rendered exactly (%d of them rendered by jinja2 too, %d refused by "
          "jinja2 on every conversation); %d differ" % (len(exact) + len(unrenderable) - len(
              [n for n in unrenderable if n in differ]), total, len(exact), len(unrenderable), len(differ)))
    if unrenderable:
        print("template_ref: jinja2 renders none of the conversations of: " + ", ".join(unrenderable))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
