"""ChatTemplate: the Jinja chat template a model carries — GGUF metadata's `tokenizer.chat_template`, a Hugging
Face folder's tokenizer_config.json `chat_template` (a string, or named templates: "default" is used) or its
chat_template.jinja — with the special tokens the template reads (`bos_token`, `eos_token`, `unk_token`,
`pad_token`, as transformers' special_tokens_map), rendered by ember's sandbox (ember.jinja.chat) as transformers'
apply_chat_template renders it.

    tpl = tokenizer.chat_template                      # set by the loaders; None for a base model
    text = tpl.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    ids = tokenizer.encode(text, bos=False, special=True)   # the template writes BOS itself where it wants one
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ember.errors import FormatError

MAX_TEMPLATE_CHARS = 1 << 20
SPECIAL_NAMES = (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
                 ("pad_token", "padding_token_id"))


@dataclass
class ChatTemplate:
    source: str
    special: dict = field(default_factory=dict)   # {"bos_token": "<|im_start|>", ...}
    name: str = "chat_template"

    def render(self, messages, add_generation_prompt: bool = True, tools=None, **kwargs) -> str:
        """The prompt text for `messages` (a list of {"role", "content", ...} dicts)."""
        from ember.jinja.chat import render_chat_template
        return render_chat_template(self.source, messages, add_generation_prompt=add_generation_prompt, tools=tools,
                                    name=self.name, **{**self.special, **kwargs})


def _checked(source, where: str) -> str:
    if not isinstance(source, str):
        raise FormatError(f"ember: {where}: the chat template must be a string, got {type(source).__name__}")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise FormatError(f"ember: {where}: the chat template has {len(source):,} characters "
                          f"(at most {MAX_TEMPLATE_CHARS:,})")
    return source


def from_gguf(md: dict, where: str) -> ChatTemplate | None:
    """`tokenizer.chat_template`, with the special tokens named by `tokenizer.ggml.*_token_id`."""
    source = md.get("tokenizer.chat_template")
    if source is None:
        return None
    tokens = md.get("tokenizer.ggml.tokens") or []
    special = {}
    for name, key in SPECIAL_NAMES:
        i = md.get(f"tokenizer.ggml.{key}")
        if isinstance(i, int) and 0 <= i < len(tokens):
            special[name] = tokens[i]
    return ChatTemplate(_checked(source, f"{where} tokenizer.chat_template"), special,
                        f"{where.rsplit('/', 1)[-1]} chat template")


def _token_text(v):
    """A tokenizer_config.json special token: a string or an AddedToken dict {"content": ...}."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def from_hf_folder(source) -> ChatTemplate | None:
    """tokenizer_config.json's chat_template (or chat_template.jinja beside it) of an ember.hub.Source."""
    from ember.io.formats import read_json_object
    cfg_path = source.path("tokenizer_config.json", required=False)
    cfg = read_json_object(cfg_path) if cfg_path is not None else {}
    where = str(cfg_path or source)
    tpl = cfg.get("chat_template")
    if isinstance(tpl, list):  # named templates: [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("default")
    if tpl is None:
        jinja = source.path("chat_template.jinja", required=False)
        if jinja is not None:
            with open(jinja, encoding="utf-8") as f:
                tpl, where = f.read(MAX_TEMPLATE_CHARS + 1), str(jinja)
    if tpl is None:
        return None
    special = {name: _token_text(cfg.get(name)) for name, _ in SPECIAL_NAMES}
    return ChatTemplate(_checked(tpl, where), {k: v for k, v in special.items() if v is not None},
                        f"{where.rsplit('/', 1)[-1]} chat_template")


def parse_messages(text: str, where: str) -> list[dict]:
    """A messages file (`ember chat --messages`): a JSON list of {"role", "content"} objects, or an object with
    a "messages" list (an OpenAI request body)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"ember: {where}: not JSON ({e})") from None
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list) or not data:
        raise FormatError(f"ember: {where}: expected a non-empty list of messages (or an object with 'messages')")
    for i, m in enumerate(data):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise FormatError(f"ember: {where}: message {i} must be an object with a 'role' string")
        if m.get("content") is not None and not isinstance(m["content"], str):
            raise FormatError(f"ember: {where}: message {i}: 'content' must be a string")
    return data
