"""ember.jinja, the sandboxed Jinja subset chat templates render in, against jinja2 itself as transformers sets it
up for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception): the real chat templates llama.cpp ships (llama-cpp-python's sdist: Llama 3.x, Qwen 2.5/3,
Mistral, Phi-3.5, Gemma 2, SmolLM3, DeepSeek, Hermes, Granite ... ~70 files) plus llama-cpp-python's own and
SmolLM2's, on multi-turn conversations with and without system messages, tools and tool calls; the language
piece by piece on small templates; and what the sandbox refuses or bounds (escapes, mutation, size, time)."""
from __future__ import annotations

import json
import tarfile

import pytest

from ember.jinja import (Template, TemplateError, TemplateLimitError, TemplateRaised, TemplateSecurityError,
                         TemplateSyntaxError)
from ember.jinja.chat import render_chat_template
from expected_skips import missing

jinja2 = pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")
from transformers.utils.chat_template_utils import (_compile_jinja_template, _normalize_chat_messages,  # noqa: E402
                                                   render_jinja_template)

LLAMA_CPP_PY = "0.3.36"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "description": "The city"}},
                                               "required": ["city"]}}}]
CONVERSATIONS = {
    "one": [{"role": "user", "content": "Hello!"}],
    "system": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi  "}],
    "multi": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
              {"role": "user", "content": "And 3+3?"}],
    "multi_system": [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "A"},
                     {"role": "assistant", "content": " B "}, {"role": "user", "content": "C\n"}],
    "tool_call": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"id": "call12345", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "tool_call_id": "call12345", "content": "22C"},
                  {"role": "assistant", "content": "It is 22C."}],
    "wrong_order": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}],
    "unicode": [{"role": "user", "content": "日本語 😀 \"quotes\" <tags> {braces} {{ not a tag }}"}],
    "none_content": [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": None,
                      "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
    "reasoning": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "hmm"},
                  {"role": "user", "content": "Q2"}],
}
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


@pytest.fixture(scope="module")
def templates():
    """{name: source}: llama.cpp's models/templates (from the llama-cpp-python sdist, as test_quant_codec fetches
    it), llama-cpp-python's built-in Jinja formats and SmolLM2's GGUF template."""
    from ember import hub
    try:
        sdist = hub.fetch_pypi("llama-cpp-python", LLAMA_CPP_PY, sdist=True, timeout=600)
    except OSError:
        missing("cannot download the llama-cpp-python sdist (llama.cpp's chat templates)")
    out = {}
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            if "/models/templates/" in m.name and m.name.endswith(".jinja"):
                out[m.name.rsplit("/", 1)[1]] = tf.extractfile(m).read().decode("utf-8")
    import llama_cpp.llama_chat_format as fmt
    for name in ("CHATML_CHAT_TEMPLATE", "LLAMA3_INSTRUCT_CHAT_TEMPLATE", "MISTRAL_INSTRUCT_CHAT_TEMPLATE",
                 "MIXTRAL_INSTRUCT_CHAT_TEMPLATE"):
        out[f"llama-cpp-python:{name}"] = getattr(fmt, name)
    from smollm2_assets import smollm2_gguf
    from ember.io.gguf import metadata
    out["SmolLM2-135M-Instruct"] = metadata(smollm2_gguf())["tokenizer.chat_template"]
    return out


def _reference(src, messages, **kw):
    """What apply_chat_template(tokenize=False) renders: messages normalized (None values dropped), then the template."""
    try:
        return render_jinja_template([_normalize_chat_messages(messages)], chat_template=src, **kw)[0][0], None
    except Exception as e:  # noqa: BLE001 - any failure of the reference is compared with ember's
        return None, e


def _ember(src, messages, **kw):
    try:
        return render_chat_template(src, messages, **kw), None
    except TemplateError as e:
        return None, e


def test_real_chat_templates_render_as_transformers(templates):
    assert len(templates) >= 70
    major = ["meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
             "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
             "microsoft-Phi-3.5-mini-instruct.jinja", "google-gemma-2-2b-it.jinja", "HuggingFaceTB-SmolLM3-3B.jinja",
             "SmolLM2-135M-Instruct", "llama-cpp-python:CHATML_CHAT_TEMPLATE"]
    assert all(m in templates for m in major)
    compared, refused, diffs = 0, 0, []
    for name, src in sorted(templates.items()):
        for cname, messages in CONVERSATIONS.items():
            for agp in (True, False):
                for tools in ((None, TOOLS) if cname in ("one", "tool_call") else (None,)):
                    kw = dict(add_generation_prompt=agp, tools=tools, documents=None, **SPECIAL)
                    want, werr = _reference(src, messages, **kw)
                    got, gerr = _ember(src, messages, **kw)
                    if werr is not None:  # the template refuses the conversation (or needs a filter transformers lacks)
                        refused += 1
                        assert gerr is not None or "filter" in str(werr), (name, cname, werr, got)
                        if isinstance(werr, jinja2.TemplateError) and "raise_exception" in src and \
                                type(werr).__name__ == "TemplateError":
                            assert isinstance(gerr, TemplateRaised) and str(werr) in str(gerr), (name, werr, gerr)
                        continue
                    compared += 1
                    if got != want:
                        diffs.append((name, cname, agp, tools is not None, gerr, want[:200], (got or "")[:200]))
    print(f"{compared} renders equal to transformers' on {len(templates)} templates; {refused} refused by both")
    assert not diffs, f"{len(diffs)} renders differ, first: {diffs[:3]}"
    assert compared > 1000


# ---------------------------------------------------------------------------- the language, piece by piece

CASES = [
    ("text only\n", {}),
    ("a\n  {% if x %}\n    yes\n  {% endif %}\nb", {"x": True}),
    ("{%- if x -%}  y  {%- endif -%}  z", {"x": 1}),
    ("  {%+ if x %}keep{% endif +%}\nnext", {"x": 1}),
    ("{# a comment #}\n  {# another #}\nafter", {}),
    ("{{ x }}\n{{ y }}\n", {"x": 1, "y": None}),
    ("{% raw %}{{ not rendered }}{% endraw %}", {}),
    ("{{ 1 + 2 * 3 ** 2 // 4 % 5 - -1 }} {{ 7 / 2 }} {{ 'a' ~ 1 ~ none }} {{ 2 ** 10 }}", {}),
    ("{{ not x and y or z }} {{ x if y else z }} {{ x if not y }}|", {"x": 0, "y": 1, "z": "z"}),
    ("{{ 1 < 2 < 3 }} {{ 3 in [1, 3] }} {{ 'b' not in 'abc' }} {{ 'k' in {'k': 1} }}", {}),
    ("{{ [1, 2, 3][1:] }} {{ 'hello'[::-1] }} {{ xs[-1] }} {{ xs[10] }}|{{ d.k }} {{ d['k'] }} {{ d.nope }}|",
     {"xs": [1, 2, 3], "d": {"k": "v"}}),
    ("{% for a, b in pairs %}{{ loop.index }}{{ a }}{{ b }}{% if loop.first %}F{% endif %}{% if loop.last %}L"
     "{% endif %}{{ loop.revindex0 }}{{ loop.length }}{% endfor %}", {"pairs": [[1, 2], [3, 4], [5, 6]]}),
    ("{% for x in xs if x > 1 %}{{ loop.index0 }}:{{ x }}{% else %}none{% endfor %}|{% for x in [] %}{% else %}"
     "empty{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}"
     "{% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
    ("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}/{{ loop.cycle('a', 'b') }} {% endfor %}",
     {"xs": [1, 2, 3]}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}block {{ a }}{% endset %}[{{ c }}]", {}),
    ("{% macro f(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}{{ f('x', 'y') }}", {}),
    ("{{ '  t  ' | trim }}|{{ 'x-y' | trim('x') }}|{{ [1, 2] | length }}|{{ 'abc' | upper }}|{{ 'A B' | lower }}",
     {}),
    ("{{ x | default('d') }}|{{ '' | default('e', true) }}|{{ none | default('n') }}|{{ y | d(3) }}", {"y": 0}),
    ("{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é<>&' | tojson }}|{{ [1, 'a', none, true] | tojson }}",
     {"d": {"b": 1, "a": [1.5, "x"]}}),
    ("{{ xs | join(', ') }}|{{ xs | first }}|{{ xs | last }}|{{ xs | sort | list }}|{{ xs | reverse | list }}|"
     "{{ xs | unique | list }}|{{ xs | min }}|{{ xs | max }}|{{ xs | sum }}", {"xs": [3, 1, 2, 3]}),
    ("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }}|"
     "{{ ms | rejectattr('role', 'eq', 'user') | list | length }}|{{ ms | map(attribute='role') | unique | list }}|"
     "{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [0, 1, '', 'a'] | select | list }}|"
     "{{ ['a', 'b'] | map('upper') | list }}",
     {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user",
                                                                                     "content": "c"}]}),
    ("{% set g = xs | map('upper') %}{{ g | join }}|{{ g | join }}|{{ g is iterable }}", {"xs": ["a", "b"]}),
    ("{{ d | items | list }}|{{ d | dictsort }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|"
     "{{ d.keys() | list }}|{{ d.get('a') }}|{{ d.get('z', 0) }}", {"d": {"b": 2, "a": 1}}),
    ("{{ 'a,b,c'.split(',') }}|{{ ' x '.strip() }}|{{ 'abc'.startswith('a') }}|{{ 'Hello {}!'.format('you') }}|"
     "{{ 'x'.replace('x', 'yy') }}|{{ 'tit le'.title() }}|{{ 'tit-le' | title }}|{{ 'ab' | capitalize }}", {}),
    ("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 1 is number }}{{ 'a' is string }}"
     "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 3 is odd }}{{ 4 is even }}"
     "{{ 9 is divisibleby 3 }}{{ 1 is integer }}{{ 1.5 is float }}{{ true is boolean }}{{ x is not none }}",
     {"x": 1}),
    ("{{ 'a'|safe + '<b>' }}|{{ '<i>' | e }}|{{ ('<x>' | safe) ~ '<y>' }}|{{ '%s-%d' | format('a', 3) }}", {}),
    ("{{ text | indent(2) }}|{{ text | indent(2, first=true) }}|{{ 'a b c' | wordcount }}|{{ 3.14159 | round(2) }}|"
     "{{ '42' | int + 1 }}|{{ 'x' | int }}|{{ '2.5' | float }}|{{ -3 | abs }}", {"text": "l1\nl2\n\nl4"}),
    ("{{ xs | sort(attribute='n', reverse=true) | map(attribute='n') | list }}|{{ xs | sum(attribute='n') }}",
     {"xs": [{"n": 2}, {"n": 3}, {"n": 1}]}),
    ("{{ [1, 2] + [3] }}{{ (1, 2) }}{{ {'a': 1} }}{{ true }}{{ 1.0 }}{{ 'x' * 3 }}", {}),
    ("{% filter upper %}shout {{ x }}{% endfilter %}", {"x": "me"}),
    ("{% generation %}tracked {{ 1 }}{% endgeneration %}", {}),
    ("{%- for m in messages -%}\n  {{- m.role }}: {{ m.content }}\n{% endfor -%}", {
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}),
    ("{{ x.y }}", {"x": 1}),
    ("{{ 'abc' | list }}|{{ 'b' in ['a', 'b'] | list }}|{{ (xs | first) | string }}|{{ xs[0:2] }}",
     {"xs": ["p", "q", "r"]}),
]


def _jinja2(src, data):
    try:
        return _compile_jinja_template(src).render(**data), None
    except Exception as e:  # noqa: BLE001
        return None, e


@pytest.mark.parametrize("src,data", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_language_as_jinja2(src, data):
    want, werr = _jinja2(src, data)
    try:
        got, gerr = Template(src).render(**data), None
    except TemplateError as e:
        got, gerr = None, e
    assert (werr is None) == (gerr is None), (werr, gerr)
    assert got == want


@pytest.mark.parametrize("src,kind", [
    ("{{ x.y.z }}", "UndefinedError"), ("{{ x + 1 }}", "UndefinedError"), ("{{ raise_exception('no') }}", "Raised"),
    ("{% if %}", "SyntaxError"), ("{% for x in %}", "SyntaxError"), ("{{ 1 + }}", "SyntaxError"),
    ("{% endfor %}", "SyntaxError"), ("{% if x %}", "SyntaxError"), ("{{ x | nope }}", "SyntaxError"),
    ("{{ x is nope }}", "SyntaxError"), ("{% include 'other' %}", "SyntaxError"), ("{% extends 'base' %}", "SyntaxError"),
    ("{% import 'm' as m %}", "SyntaxError"), ("{{ 1 / 0 }}", "TemplateError"), ("{{ [] | first + 1 }}", "UndefinedError"),
])
def test_errors_name_the_template_and_line(src, kind):
    want, werr = _jinja2(src, {})
    assert werr is not None  # jinja2 refuses each of these too
    with pytest.raises(TemplateError) as e:
        Template("\n" + src, "my_template").render()
    assert kind in type(e.value).__name__
    assert "my_template" in str(e.value) and str(e.value).startswith("ember:")


# ---------------------------------------------------------------------------- what the sandbox refuses

ESCAPES = [
    "{{ ''.__class__ }}", "{{ messages.__class__.__mro__ }}", "{{ range.__globals__ }}", "{{ x['__class__'] }}",
    "{{ namespace.__init__.__globals__ }}", "{{ ''.format.__self__ }}", "{{ '{0.__class__}'.format(1) }}",
    "{{ '{0[0]}'.format('ab') }}", "{{ messages | attr('__class__') }}",
    "{{ messages | map(attribute='__class__') | list }}", "{% set ns = namespace(__dict__=1) %}",
    "{% set ns = namespace() %}{% set ns.__class__ = 1 %}", "{{ messages.append(1) }}", "{{ d.update({'a': 1}) }}",
    "{{ d.pop('a') }}", "{{ messages.pop() }}", "{% for c in ().__class__.__base__.__subclasses__() %}{% endfor %}",
    "{{ cycler.__init__.__globals__.os }}", "{{ lipsum.__globals__ }}", "{{ self.__init__ }}",
    "{{ messages.__getitem__(0) }}", "{{ (1).__class__ }}", "{{ d.items.__self__ }}", "{{ loop.__class__ }}",
    "{{ raise_exception.__globals__ }}", "{{ dict.__call__ }}", "{{ ''.join.__self__.__class__ }}",
]


@pytest.mark.parametrize("src", ESCAPES)
def test_sandbox_refuses_escapes(src):
    data = {"messages": [{"role": "user", "content": "x"}], "d": {"a": 1}}
    try:
        out = Template(src).render(**data)
    except TemplateError as e:  # refused (or an undefined name such as cycler/lipsum/self)
        assert isinstance(e, (TemplateSecurityError, TemplateError))
        return
    assert "class" not in out and "function" not in out and "<" not in out, out  # rendered nothing of Python
    assert data == {"messages": [{"role": "user", "content": "x"}], "d": {"a": 1}}  # and changed nothing


@pytest.mark.parametrize("src", [
    "{{ 'a' * 1000000000 }}", "{{ [1] * 1000000000 }}", "{% for i in range(1000000000) %}{% endfor %}",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{{ 10 ** 100000 }}", "{{ '%*d' % (1000000000, 1) }}",
    "{{ 'x'.ljust(10000000000) }}", "{{ 'x'.center(10000000000) }}", "{{ 'ab'.replace('', 'x' * 3000000) }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "{{ ' '.join(['x' * 1000000] * 10) }}", "{{ 'x' | indent(100000000) }}",
])
def test_sandbox_bounds_size_and_time(src):
    import time
    from ember.limits import budget
    saved = budget.template_seconds
    budget.template_seconds = 2.0
    try:
        t0 = time.monotonic()
        with pytest.raises(TemplateError):
            Template(src).render()
        assert time.monotonic() - t0 < 10
    finally:
        budget.template_seconds = saved


def test_template_data_is_copied_not_shared():
    msgs = [{"role": "user", "content": "x", "extra": object()}]
    out = render_chat_template("{{ messages[0].extra }}|{{ messages[0].content }}", msgs)
    assert out == "<object>|x"  # a foreign object becomes a placeholder naming its type, as transformers does
    with pytest.raises(TemplateError, match="message 0 must be a dict"):
        render_chat_template("{{ 1 }}", ["not a dict"])


PYODIDE_SNIPPET = """
import json
from ember.jinja.chat import render_chat_template
cases = json.loads(open("/tpl/cases.json").read())
result = [render_chat_template(c["template"], c["messages"], add_generation_prompt=True, tools=c["tools"],
                               bos_token="<s>", eos_token="</s>") for c in cases]
"""


def test_chat_templates_in_pyodide_render_as_transformers(templates, tmp_path):
    """The same sandbox under Pyodide (no jinja2 there): the major families' templates give transformers' text."""
    from pyodide_runner import PyodideSession, node_path, unavailable
    from ember.wasm.assets import PyodideFetchError, ensure_pyodide
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    try:
        dist = ensure_pyodide()
    except PyodideFetchError as exc:
        unavailable(str(exc))
    names = ["SmolLM2-135M-Instruct", "meta-llama-Llama-3.1-8B-Instruct.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja",
             "mistralai-Mistral-Nemo-Instruct-2407.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
             "google-gemma-2-2b-it.jinja"]
    cases = [{"template": templates[n], "messages": CONVERSATIONS[c], "tools": TOOLS if c == "tool_call" else None}
             for n in names for c in ("multi", "multi_system", "tool_call") if not (n.startswith("google") and
                                                                                    c != "multi")]
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    with PyodideSession(dist=dist, mounts={"/tpl": tmp_path}) as session:
        got = session.run(PYODIDE_SNIPPET, timeout=300)["result"]
    for case, text in zip(cases, got):
        want, err = _reference(case["template"], case["messages"], add_generation_prompt=True, tools=case["tools"],
                               documents=None, bos_token="<s>", eos_token="</s>")
        assert err is None and text == want
