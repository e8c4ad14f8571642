"""template_features.py — small templates that exercise the Jinja features
chat templates use more rarely than the 72 real ones do, each rendered by
jinja2 and by quill (tests/template_ref.py runs them with the conversations
of tests/template_convs.json). One feature or a few per template, so that a
difference points at its cause."""

FEATURES = {
    "macros": r"""
{%- macro greet(name, punct='!', loud=false) -%}
{{ (name | upper) if loud else name }}{{ punct }}{{ varargs | length }}{{ kwargs | dictsort }}
{%- endmacro -%}
{{ greet('a') }}|{{ greet('b', '?') }}|{{ greet('c', loud=true) }}|{{ greet('d', '.', true, 1, 2) }}|{{ greet('e', x=1, y='z') }}
{%- macro wrap(tag) %}<{{ tag }}>{{ caller(tag | length) }}</{{ tag }}>{% endmacro %}
{% call(n) wrap('div') %}inner {{ n }} {{ messages | length }}{% endcall %}
{% macro rec(n) %}{% if n > 0 %}{{ n }},{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}
""",
    "loops": r"""
{%- for m in messages -%}
{{ loop.index }}/{{ loop.length }} {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.first }} {{ loop.last }} {{ loop.cycle('odd', 'even') }}
{%- if loop.previtem is defined %} prev={{ loop.previtem.role }}{% endif %}{% if loop.nextitem is defined %} next={{ loop.nextitem.role }}{% endif %}
 changed={{ loop.changed(m.role) }}
{% endfor -%}
{%- for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}
{% for x in [] %}never{% else %}empty{% endfor %}
{% for k, v in {'b': 1, 'a': [2, 3]}.items() %}{{ k }}={{ v }};{% endfor %}
{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}
{% for c in 'héllo' %}{{ c }}.{% endfor %}
{% for i in range(3) %}{% for j in range(i) %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{% endfor %}
{% for i in range(10, 0, -3) %}{{ i }} {% endfor %}
{% for m in messages if m.role == 'user' %}{{ loop.index }}{{ loop.last }} {% endfor %}
{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}
""",
    "set and namespace": r"""
{%- set ns = namespace(count=0, last=none, items=[]) -%}
{%- for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.role %}{% set ns.items = ns.items + [m.role[0]] %}{% endfor -%}
{{ ns.count }} {{ ns.last }} {{ ns.items }}
{% set a, b = 1, 'two' %}{{ a }}{{ b }}
{% set block %}  Block {{ a }}
{% endset %}[{{ block }}]
{% set t | trim | upper %}  trimmed {{ b }}  {% endset %}[{{ t }}]
{% filter upper %}shout {{ b }}{% endfilter %}
{% if true %}{% set inner = 'seen' %}{% endif %}{{ inner }}
{% set d = dict(a=1, b=[1, 2]) %}{{ d }} {{ namespace(d).b }}
""",
    "strings": r"""
{%- set s = '  Hello, World! ünï  ' -%}
[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ s.strip(' H!ï') }}][{{ s | trim }}][{{ s | trim(' ') }}]
{{ s.split() }} {{ s.split(',') }} {{ 'a,b,,c'.split(',', 1) }} {{ 'a,b,,c'.rsplit(',', 1) }} {{ 'a b  c'.split(' ') }}
{{ 'x<think>y</think>z'.split('</think>')[-1] }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}
{{ s.upper() }} {{ s.lower() }} {{ 'hello wORLD-foo bar'.title() }} {{ 'hello wORLD-foo(bar'|title }} {{ 'élan VITAL'.capitalize() }}
{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abcabc'.count('bc') }}
{{ '{}-{}'.format(1, 'x') }} {{ '{1}{0}{name}'.format('a', 'b', name='n') }} {{ '{{}}{}'.format(3) }}
{{ ', '.join(['a', 'b']) }} {{ 'l1\nl2\r\nl3'.splitlines() }} {{ '42'.isdigit() }} {{ 'ab'.isalpha() }}
{{ s[2:7] }}|{{ s[::-1] }}|{{ s[-4:] }}|{{ s[1] }}|{{ s[:-3] }}|{{ 'abcdef'[1:5:2] }}|{{ s | length }}|{{ s | reverse }}
{{ 'a' ~ 1 ~ none ~ true ~ 1.5 }} {{ 'ab' * 3 }} {{ 'b' in 'abc' }} {{ 'z' not in 'abc' }} {{ 'x' | replace('x', 'y') }}
{{ "it's" }} {{ ["it's", 'say "hi"', "both ' \"", 'tab\there', 'nl\n', 'uni ü', '\x01\x7f'] }}
{{ '\u00e9\x41\101\N' if false else '\u00e9\x41\101' }} {{ 'a' 'b' "c" }}
""",
    "numbers": r"""
{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -2 }} {{ 2 ** 0.5 }}
{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 123456789.123 }} {{ -0.0 }} {{ 1e100 }} {{ 3.0 * 2 }} {{ 10 / 4 }}
{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -3 | abs }} {{ 3.7 | int }} {{ '42' | int }} {{ ' 7 ' | int }} {{ 'x' | int(5) }} {{ '3.9' | int }}
{{ '2.5' | float }} {{ 3 | float }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 2.1 | round(0, 'ceil') }} {{ [1, 2.5, 3] | sum }}
{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 2 >= 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}
{{ 10 | string + 'x' }} {{ 1 if 0 else 2 }} {{ [] or 'empty' }} {{ 'x' and 'y' }} {{ not none }} {{ -(3) }} {{ +4 }}
""",
    "collections": r"""
{%- set users = messages | selectattr('role', 'equalto', 'user') | list -%}
{{ users | length }} {{ messages | map(attribute='role') | join(',') }} {{ messages | map(attribute='role') | unique | list }}
{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | list }} {{ messages | selectattr('reasoning_content') | list | length }}
{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }}
{{ messages | sort(attribute='role') | map(attribute='role') | first }} {{ [1, 5, 3] | max }} {{ ['b', 'a'] | min }}
{{ {'b': 2, 'a': 1} | dictsort }} {{ {'b': 2, 'a': 1} | dictsort(by='value', reverse=true) }} {{ {'x': 1} | items | list }}
{{ [1, 2, 3] | select('odd') | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ ['a', 'b'] | map('upper') | list }}
{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | list }} {{ {'k': 1} | list }} {{ [[1, 2], [3]] | map('length') | list }}
{{ [1, 2, 3][-1] }} {{ [1, 2, 3][1:] }} {{ (1, 2, 3)[:2] }} {{ (1,) }} {{ () }} {{ [1, 2][5] is defined }} {{ {'a': 1}['a'] }} {{ {'a': 1}.get('b', 'dflt') }} {{ {'a': 1}.get('b') }}
{{ {'a': 1, 'b': 2}.keys() | list }} {{ {'a': 1, 'b': 2}.values() | list }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ [1, [2, 'x']] }}
{%- set gen = messages | selectattr('role', 'equalto', 'nobody') %} {{ 'gen is true' if gen else 'gen is false' }} {{ gen | list | length }}
{%- set g2 = [1, 2, 3] | map('string') %} {{ g2 | join }}{{ g2 | join }} {{ [1, 2, 3] | join('-', attribute=none) if false else [1, 2, 3] | join('-') }}
{{ ['x', 'y'] | join(attribute='0') }} {{ [{'n': 1}, {'n': 2}] | sum(attribute='n') }}
""",
    "tests": r"""
{%- for v in [none, true, 0, 1.5, 'a', [1], {'a': 1}, undefined_name, 'ABC', 'abc'] -%}
{{ v is defined }}{{ v is none }}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is true }}{{ v is false }}{{ v is callable }};
{%- endfor %}
{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is in [1, 2] }} {{ 1 is eq 1 }} {{ 1 is ne 2 }}
{{ 3 is gt 2 }} {{ 3 is ge 3 }} {{ 1 is lt 2 }} {{ 1 is le 0 }} {{ none is sameas none }} {{ x is undefined }} {{ messages is not string }}
{{ range is callable }} {{ 'x' is not none and 'y' }}
""",
    "tojson and repr": r"""
{%- set obj = {'name': 'f', 'args': {'b': [1, 2.5, true, none], 'a': 'ü"\n'}, 'n': -3, 'e': {}, 'l': []} -%}
{{ obj | tojson }}
{{ obj | tojson(indent=2) }}
{{ obj | tojson(indent=4, sort_keys=true) }}
{{ obj | tojson(ensure_ascii=true) }}
{{ obj | tojson(separators=(',', ':')) }}
{{ obj | tojson(indent='\t') }}
{{ 'é🎉' | tojson(true) }} {{ 1e20 | tojson }} {{ 0.5 | tojson }} {{ {1: 'int key', none: 'n'} | tojson }}
{{ obj }} {{ messages[0] }} {{ tools }} {{ (1, 'a') }} {{ [none, true, false] }}
{{ obj | string }} {{ 12 | string | length }}
""",
    "whitespace": "  {% if true %}\n    indented block\n  {% endif %}\n\t{%- if true -%}  stripped  {%- endif %}\n{%+ if true %}kept lstrip{% endif %}\n{% if true +%}\nkept newline{% endif %}\n{# comment #}\n  {# indented comment #}\nafter\n{{- ' tight ' -}}\nvar {{ 'x' }}   \n  {{ 'y' }}\n{% raw %}{{ not a tag }} {% if %}{% endraw %}\n{%- raw -%}  raw stripped  {%- endraw %}\nend\r\nwindows line\n\n",
    "safe and escape": r"""
{{ '<b>' | e }} {{ ('<a>' | safe) + '<b>' }} {{ '<c>' + ('&' | safe) }} {{ ('x' | safe) ~ '<y>' }} {{ ('"q"' | escape) + "'" }}
{{ (('<' | safe) * 2) + '>' }} {{ ('  <p>  ' | safe | trim) + '<' }} {{ messages[0].content | tojson | safe }}
""",
    "conditionals and undefined": r"""
{{ 'yes' if messages else 'no' }} [{{ 'x' if false }}] {{ missing | default('d') }} {{ '' | default('e', true) }} {{ none | default('n') }}
{{ missing | length }} [{{ missing }}] {{ missing is defined }} {{ messages[0].nothing is defined }} {{ messages[0]['role'] }}
{% if messages[0].tool_calls is defined and messages[0].tool_calls %}calls{% elif messages[0].role == 'system' %}sys{% elif messages %}other{% else %}none{% endif %}
{{ none.attr is defined }} {{ (messages | first).role }} {{ messages[-1].role }} {{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}
{{ bos_token ~ eos_token }} {{ bos_token | length }} {{ enable_thinking is defined }} {{ (enable_thinking | default(true)) }}
""",
    "dates": r"""{{ strftime_now('%Y-%m-%d %H:%M %A %B %d %b %j') }} {{ strftime_now('%d %b %Y') }}""",
    "errors: raise": r"""{% if messages | length > 3 %}{{ raise_exception('too long: ' ~ messages | length) }}{% endif %}ok""",
    "errors: undefined call": r"""{{ messages[0].content.nosuchmethod() }}""",
    "errors: type": r"""{{ messages | length + 'x' }}""",
    "errors: generator length": r"""{{ messages | selectattr('role') | length }}""",
    "errors: sandbox": r"""{% set l = [] %}{{ l.append(1) }}{{ l }}""",
    "errors: none iteration": r"""{% for x in none %}{% endfor %}""",
    "errors: division": r"""{{ 1 // (messages | length - messages | length) }}""",
    "errors: unpack": r"""{% for a, b in [[1, 2, 3]] %}{% endfor %}""",
}
