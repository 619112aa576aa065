"""The chat's formats for the fuzzer: GGUF byte-level BPE vocabularies (a vocabulary's `tokenizer.ggml.*` metadata,
mutated as values -- hostile ints, strings, lists -- or as GGUF bytes, then encode and decode of texts a chat client
sends); chat templates (real templates mutated as text, with sandbox escapes, output bombs, endless loops and
recursion spliced in; a render that succeeds with a Python object's repr in its output is a finding); and the JSON
schemas of structured output (an OpenAI response_format mutated as JSON, compiled by ember.grammar)."""
from __future__ import annotations

from mutate import HOSTILE_VALUES, mutate_bytes

TEXTS = ["Hello world, it's 2024!", "naïve café 日本語 👍🏽  x", "<|im_start|>user\nhi<|im_end|>", "", "a" * 300,
         # what a chat client sends: specials cut and nested, combining marks, zero-widths, long digit and space runs
         "<|im_<|im_start|>start|>\u0301\u0301x\u200b\u200d" + "1" * 120 + " " * 120 + "\t\n\r" * 20 + "'s'S'LL" * 10]

ESCAPES = ["{{ ''.__class__.__mro__ }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}", "{{ cycler.__init__.__globals__ }}",
           "{{ messages.__class__ }}", "{{ self.__init__ }}", "{{ lipsum.__globals__ }}", "{{ range.__self__ }}",
           "{% set x = messages.append(1) %}", "{{ messages[0].update({'a': 1}) }}", "{% import 'os' as os %}",
           "{% include '/etc/passwd' %}", "{{ config }}", "{{ namespace.__init__.__globals__ }}",
           "{{ (messages|attr('__class__')) }}", "{{ ''|attr('\\x5f\\x5fclass\\x5f\\x5f') }}"]
BOMBS = ["{{ 'x' * 1000000000 }}", "{% for i in range(1000000000) %}x{% endfor %}",
         "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
         "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{{ ('x' * 1000) * 1000000 }}",
         "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
         "{{ " + "(" * 10000 + "1" + ")" * 10000 + " }}", "{% if %}", "{{", "{% for %}{% endfor %}"]
# what only an evaluated escape prints (an escape spliced into a string literal is printed as text: not a leak)
LEAKS = ("<class", "<function", "<built-in", "<module", "<bound method", "object at 0x", "<method")


def gen_template(rng, base) -> bytes:
    src = rng.choice(base["templates"])
    kind = rng.random()
    if kind < 0.3:
        at = rng.randrange(len(src) + 1)
        src = src[:at] + rng.choice(ESCAPES) + src[at:]
    elif kind < 0.5:
        at = rng.randrange(len(src) + 1)
        src = src[:at] + rng.choice(BOMBS) + src[at:]
    else:
        return mutate_bytes(rng, src.encode())
    return src.encode()


def load_template(raw: bytes):
    from ember.jinja import Template
    src = raw.decode("utf-8", "replace")
    t = Template(src, "chat_template")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and?"}]
    out = t.render(messages=messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    if any(leak in out for leak in LEAKS):
        raise RuntimeError(f"the template rendered a Python object: {out[:200]!r}")
    return out


def gen_gguf_bpe(rng, base) -> bytes:
    from ember.io import gguf
    md = dict(base["bpe_metadata"])
    if rng.random() < 0.4:
        return mutate_bytes(rng, base["bpe.gguf"], lo=rng.choice([0, 24]))
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(sorted(md))
        v = md[key]
        r = rng.random()
        if isinstance(v, list) and v and r < 0.5:
            v = list(v)
            i = rng.randrange(len(v))
            v[i] = rng.choice([x for x in HOSTILE_VALUES if isinstance(x, type(v[i])) and not isinstance(x, bool)]
                              or [v[0]])
            if rng.random() < 0.3:
                v = v[:rng.randrange(len(v))]
        elif r < 0.8:
            v = rng.choice(HOSTILE_VALUES)
        else:
            v = rng.choice(["", "llama3", "qwen2", "default", "nope", "gpt-2", "deepseek-coder"])
        md[key] = v
    try:
        return gguf.dumps({}, {k: v for k, v in md.items() if v is not None})
    except Exception:  # noqa: BLE001  (a value GGUF cannot hold: damage the bytes instead)
        return mutate_bytes(rng, base["bpe.gguf"])


def load_gguf_bpe(raw: bytes):
    from ember.io import gguf
    from ember.tokenizers.gguf_bpe import BpeTokenizer
    tok = BpeTokenizer.from_gguf_metadata(gguf.metadata(raw), "<fuzz>")
    for text in TEXTS:
        for special in (False, True):
            ids = tok.encode(text, special=special)
            tok.decode(ids)
    return tok


def bpe_metadata() -> dict:
    """A small byte-level BPE vocabulary in tokenizer.ggml.* keys: the 256 byte characters, merges over
    'hello world' and a few special tokens."""
    from ember.tokenizers.byte_level import BYTES_CHAR
    tokens = [BYTES_CHAR[b] for b in range(256)]
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    tokens += ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    types = [1] * (len(tokens) - 3) + [3, 3, 3]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": len(tokens) - 1, "tokenizer.ggml.eos_token_id": len(tokens) - 2}


CHAT_TEMPLATES = [
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
    "+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}",
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
]


# ---------------------------------------------------------------- structured output (ember.grammar)

SCHEMAS = [
    {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": -5, "maximum": 100}, "b": {"enum": ["x", "y"]},
        "c": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
        "d": {"anyOf": [{"type": "null"}, {"type": "number"}]}, "e": {"$ref": "#/$defs/p"}},
     "required": ["a"], "$defs": {"p": {"type": "object", "properties": {"q": {"type": "boolean"}}}},
     "additionalProperties": False},
    {"type": "string", "pattern": "^[a-z]{2,4}\\d+$"},
    {"type": "array", "prefixItems": [{"const": 1}, {"type": "string", "format": "date"}], "items": False},
    {"type": "number", "exclusiveMinimum": 0, "maximum": 1.5},
    {"allOf": [{"type": "object", "properties": {"n": {"type": "integer", "exclusiveMaximum": 9}}}]},
]


def gen_json_schema(rng, base) -> bytes:
    """An OpenAI response_format: a schema mutated as JSON (hostile values, deep nesting, copies of its nodes)."""
    from mutate import dumps, mutate_json
    schema = rng.choice(SCHEMAS)
    kind = rng.random()
    if kind < 0.1:
        return dumps(mutate_json(rng, {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
    if kind < 0.15:
        return dumps(mutate_json(rng, {"type": "json_object"}))
    return dumps({"type": "json_schema", "json_schema": {"name": "x", "schema": mutate_json(rng, schema)}})


def load_json_schema(raw: bytes):
    """Compile the response_format as `ember api` does (a JSON it cannot parse is not the compiler's input)."""
    import json
    from ember.grammar import from_response_format
    try:
        rf = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return from_response_format(rf)
