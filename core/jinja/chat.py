"""Chat templates rendered as transformers' apply_chat_template renders them (transformers 5.x,
utils/chat_template_utils.py render_jinja_template): messages as plain dicts with the keys whose value is None
dropped, a message's reasoning also under `reasoning_content` and `thinking`, the template given `messages`,
`tools`, `documents`, `add_generation_prompt` and the tokenizer's special tokens (`bos_token`, `eos_token` ...),
with `raise_exception` and `strftime_now` beside Jinja's globals. The template is untrusted: it runs in ember's
sandbox (ember.jinja).

    text = render_chat_template(tpl, [{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                bos_token="<s>", eos_token="</s>")
"""
from __future__ import annotations

import datetime
import functools

from . import Function, Template, TemplateError

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


@functools.lru_cache(maxsize=16)
def compiled(source: str, name: str) -> Template:
    return Template(source, name)


def normalize_messages(messages) -> list[dict]:
    """transformers' _normalize_chat_messages + _alias_reasoning_fields: dicts, None values dropped."""
    if not isinstance(messages, (list, tuple)):
        raise TemplateError(f"messages must be a list of dicts, got {type(messages).__name__}", "chat")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TemplateError(f"message {i} must be a dict with 'role' and 'content', got {type(m).__name__}",
                                "chat")
        m = {k: v for k, v in m.items() if v is not None}
        reasoning = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(str(fmt))


def render_chat_template(template: str, messages, *, add_generation_prompt: bool = False, tools=None,
                         documents=None, name: str = "chat_template", **kwargs) -> str:
    """The prompt text; kwargs: the special tokens (bos_token, eos_token ...) and any template variables."""
    globals_ = {"strftime_now": Function("strftime_now", _strftime_now)}
    return compiled(template, name).render(globals_, messages=normalize_messages(messages), tools=tools,
                                           documents=documents, add_generation_prompt=add_generation_prompt,
                                           **kwargs)
