"""template_ref.py — quill's chat-template renderer against jinja2.

    /usr/bin/python3 tests/template_ref.py BUILD SHARED

For each family a Jinja template is rendered by jinja2 (set up as Hugging Face
renders chat templates: trim_blocks, lstrip_blocks, raise_exception) and by
quill's C renderer (BUILD/tests/test_template render ...), for a 3-turn
conversation with and without a system prompt; the two texts must be equal
byte for byte and quill must detect the expected family from the template.

The same conversations rendered by family name (--chat-template NAME) must
match the family's template too.

The Phi-3 and Qwen2 templates are the real ones, read from the vocabulary
GGUFs in SHARED/vocab. The others are written here from each family's
documented prompt format; they use the same special tokens as the real
templates, which is what detection keys on.
"""
import os
import subprocess
import sys

import jinja2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from gguf_reader import GGUFReader  # noqa: E402

# ---- templates written from the documented formats ------------------------------------

# Llama 2: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s>" per
# exchange; only the first user message carries the system block.
LLAMA2 = r"""
{%- set ns = namespace(sys=none, first=true) -%}
{%- if messages[0].role == 'system' -%}{%- set ns.sys = messages[0].content | trim -%}{%- endif -%}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}
    {{ bos_token }}[INST] {% if ns.first and ns.sys is not none %}<<SYS>>{{ '\n' }}{{ ns.sys }}{{ '\n' }}<</SYS>>{{ '\n\n' }}{% endif -%}
    {{ m.content | trim }} [/INST]
    {%- set ns.first = false -%}
  {%- elif m.role == 'assistant' -%}
    {{ ' ' }}{{ m.content | trim }} {{ eos_token }}
  {%- endif -%}
{%- endfor -%}
"""

# Llama 3: "<|begin_of_text|>" then "<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>"
# per message, text trimmed; the answer opens with the assistant header.
LLAMA3 = r"""
{{- bos_token -}}
{%- for m in messages -%}
<|start_header_id|>{{ m.role }}<|end_header_id|>{{ '\n\n' }}{{ m.content | trim }}<|eot_id|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|start_header_id|>assistant<|end_header_id|>{{ '\n\n' }}{%- endif -%}
"""

# Llama 3.1+: the same blocks, but a system block always comes first and states the
# knowledge cutoff and today's date before the system prompt.
LLAMA31 = r"""
{%- if date_string is not defined -%}{%- set date_string = "26 Jul 2024" -%}{%- endif -%}
{%- set ns = namespace(sys='', start=0) -%}
{%- if messages[0].role == 'system' -%}{%- set ns.sys = messages[0].content | trim -%}{%- set ns.start = 1 -%}{%- endif -%}
{{- bos_token -}}
<|start_header_id|>system<|end_header_id|>{{ '\n\n' }}Cutting Knowledge Date: December 2023{{ '\n' }}Today Date: {{ date_string }}{{ '\n\n' }}{{ ns.sys }}<|eot_id|>
{%- for m in messages[ns.start:] -%}
<|start_header_id|>{{ m.role }}<|end_header_id|>{{ '\n\n' }}{{ m.content | trim }}<|eot_id|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|start_header_id|>assistant<|end_header_id|>{{ '\n\n' }}{%- endif -%}
"""

# Mistral: "<s>[INST] {user} [/INST]{answer}</s>[INST] {user} [/INST]"; a system prompt opens
# the first user message followed by a blank line.
MISTRAL = r"""
{%- set ns = namespace(sys=none, first=true) -%}
{%- if messages[0].role == 'system' -%}{%- set ns.sys = messages[0].content -%}{%- endif -%}
{{- bos_token -}}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}
    [INST] {% if ns.first and ns.sys is not none %}{{ ns.sys }}{{ '\n\n' }}{% endif %}{{ m.content }} [/INST]
    {%- set ns.first = false -%}
  {%- elif m.role == 'assistant' -%}
    {{ m.content }}{{ eos_token }}
  {%- endif -%}
{%- endfor -%}
"""

# Gemma: "<start_of_turn>{user|model}\n{text}<end_of_turn>\n", text trimmed; no system turn,
# so a system prompt opens the first user turn followed by a blank line.
GEMMA = r"""
{%- set ns = namespace(prefix='', start=0) -%}
{%- if messages[0].role == 'system' -%}{%- set ns.prefix = (messages[0].content | trim) + '\n\n' -%}{%- set ns.start = 1 -%}{%- endif -%}
{{- bos_token -}}
{%- for m in messages[ns.start:] -%}
<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}{{ '\n' }}
{%- if loop.first %}{{ ns.prefix }}{% endif %}{{ m.content | trim }}<end_of_turn>{{ '\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}<start_of_turn>model{{ '\n' }}{%- endif -%}
"""

# ChatML: "<|im_start|>{role}\n{text}<|im_end|>\n" per message, no BOS.
CHATML = r"""
{%- for m in messages -%}
<|im_start|>{{ m.role }}{{ '\n' }}{{ m.content }}<|im_end|>{{ '\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\n' }}{%- endif -%}
"""

# ChatML with a default system prompt when the conversation brings none (as SmolLM2 and
# Qwen2 do; the sentence here is made up).
CHATML_DEFAULT = r"""
{%- for m in messages -%}
{%- if loop.first and m.role != 'system' -%}{{ '<|im_start|>system\nYou answer in rhyme.<|im_end|>\n' }}{%- endif -%}
<|im_start|>{{ m.role }}{{ '\n' }}{{ m.content }}<|im_end|>{{ '\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\n' }}{%- endif -%}
"""

# Phi-3 with a system role and a generation prompt (the later Phi-3 / 3.5 format):
# "<|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n...<|end|>\n", then
# "<|assistant|>\n" to answer, or EOS without a generation prompt.
PHI35 = r"""
{%- for m in messages -%}
{%- if m.role == 'system' and m.content -%}<|system|>{{ '\n' }}{{ m.content }}<|end|>{{ '\n' }}
{%- elif m.role == 'user' -%}<|user|>{{ '\n' }}{{ m.content }}<|end|>{{ '\n' }}
{%- elif m.role == 'assistant' -%}<|assistant|>{{ '\n' }}{{ m.content }}<|end|>{{ '\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|>{{ '\n' }}{%- else -%}{{ eos_token }}{%- endif -%}
"""

SPM = ("<s>", "</s>")  # SentencePiece BOS/EOS pieces
FAMILIES = [  # name, family quill must detect, template text, (bos, eos)
    ("llama2", "llama2", LLAMA2, SPM),
    ("llama3", "llama3", LLAMA3, ("<|begin_of_text|>", "<|end_of_text|>")),
    ("llama3.1", "llama3", LLAMA31, ("<|begin_of_text|>", "<|eot_id|>")),
    ("mistral", "mistral", MISTRAL, SPM),
    ("gemma", "gemma", GEMMA, ("<bos>", "<eos>")),
    ("chatml", "chatml", CHATML, ("<|endoftext|>", "<|im_end|>")),
    ("chatml+default", "chatml", CHATML_DEFAULT, ("<|endoftext|>", "<|im_end|>")),
    ("phi3.5", "phi3", PHI35, SPM),
]

SYSTEM = [("system", "You are a terse assistant.")]
TURNS = [  # untidy whitespace on purpose: trimming templates must trim, others must not
    ("user", "Hello there"),
    ("assistant", " Hi! How can I help?"),
    ("user", "What is 2+2? \n"),
    ("assistant", "4."),
    ("user", "And 3+3?"),
]


def jinja_render(text, msgs, gen, bos, eos):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(text).render(messages=[{"role": r, "content": c} for r, c in msgs],
                                        add_generation_prompt=gen, bos_token=bos, eos_token=eos)


def c_render(build, source_args, msgs, gen):
    stdin = b"".join(r.encode() + b"\0" + c.encode() + b"\0" for r, c in msgs)
    out = subprocess.run([os.path.join(build, "tests", "test_template"), "render", *source_args, str(int(gen))],
                         input=stdin, capture_output=True, check=True).stdout.decode()
    family, _, text = out.partition("\n")
    return family, text


def compare(what, want_family, family, want, got):
    if family != want_family:
        print("FAIL %s: detected %s, expected %s" % (what, family, want_family))
        return 1
    if got != want:
        print("FAIL %s: quill and jinja2 differ\n  jinja2: %r\n  quill:  %r" % (what, want, got))
        return 1
    print("ok   %s" % what)
    return 0


def main():
    build, shared = sys.argv[1], sys.argv[2]
    conversations = [("with system", SYSTEM + TURNS), ("no system", TURNS)]
    fails = 0
    tmp = os.path.join(build, "tests", "template_ref.jinja")
    for name, want_family, text, (bos, eos) in FAMILIES:
        with open(tmp, "w") as f:
            f.write(text)
        for label, msgs in conversations:
            for gen in (True, False):
                want = jinja_render(text, msgs, gen, bos, eos)
                family, got = c_render(build, ["--text", tmp, bos, eos], msgs, gen)
                fails += compare("%s, %s, gen=%d" % (name, label, gen), want_family, family, want, got)
    os.remove(tmp)
    # --chat-template NAME (no template text) renders the family's common variant
    by_name = {"llama2": "llama2", "llama3": "llama3", "mistral": "mistral", "gemma": "gemma", "chatml": "chatml",
               "phi3": "phi3.5"}
    for flag, name in by_name.items():
        _, _, text, (bos, eos) = next(f for f in FAMILIES if f[0] == name)
        for label, msgs in conversations:
            want = jinja_render(text, msgs, True, bos, eos)
            family, got = c_render(build, ["--name", flag, bos, eos], msgs, True)
            fails += compare("--chat-template %s = %s, %s" % (flag, name, label), flag, family, want, got)
    for vocab, want_family in [("phi-3", "phi3"), ("qwen2", "chatml")]:
        path = os.path.join(shared, "vocab", "ggml-vocab-%s.gguf" % vocab)
        r = GGUFReader(path)
        text = r.kv["tokenizer.chat_template"]
        tokens = r.kv["tokenizer.ggml.tokens"]
        bos = tokens[r.kv["tokenizer.ggml.bos_token_id"]]
        eos = tokens[r.kv["tokenizer.ggml.eos_token_id"]]
        for label, msgs in conversations:
            for gen in (True, False):
                want = jinja_render(text, msgs, gen, bos, eos)
                family, got = c_render(build, ["--gguf", path], msgs, gen)
                fails += compare("%s (real template), %s, gen=%d" % (vocab, label, gen), want_family,
                                 family, want, got)
    print("template_ref: %s" % ("FAILED" if fails else "all renderings match jinja2"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
