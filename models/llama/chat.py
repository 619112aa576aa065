"""Llama-2 chat prompt format, as Meta's llama/generation.py `chat_completion` builds it:
each user/assistant exchange is `<s>[INST] {user} [/INST] {answer} </s>`, the last user turn is
`<s>[INST] {user} [/INST]`, and a leading system message is folded into the first user turn
between <<SYS>> markers."""
from __future__ import annotations

B_INST, E_INST = "[INST]", "[/INST]"
B_SYS, E_SYS = "<<SYS>>\n", "\n<</SYS>>\n\n"


def _fold_system(messages: list[dict]) -> list[dict]:
    if not messages:
        raise ValueError("ember: chat needs at least one message")
    if messages[0]["role"] == "system":
        if len(messages) < 2:
            raise ValueError("ember: a system message must be followed by a user message")
        content = B_SYS + messages[0]["content"] + E_SYS + messages[1]["content"]
        first = {"role": messages[1]["role"], "content": content}
        messages = [first] + list(messages[2:])
    roles = [m["role"] for m in messages]
    if any(r != "user" for r in roles[::2]) or any(r != "assistant" for r in roles[1::2]) or roles[-1] != "user":
        raise ValueError(f"ember: chat roles must alternate user/assistant and end with user, got {roles}")
    return messages


def chat_segments(messages: list[dict]) -> list[tuple[str, bool]]:
    """[(text, ends_with_eos)]: each text is encoded with BOS in front (Meta's tokenizer.encode(bos=True))."""
    msgs = _fold_system(messages)
    segs = [(f"{B_INST} {u['content'].strip()} {E_INST} {a['content'].strip()} ", True)
            for u, a in zip(msgs[::2], msgs[1::2])]
    segs.append((f"{B_INST} {msgs[-1]['content'].strip()} {E_INST}", False))
    return segs


def format_chat(messages: list[dict], bos: str = "<s>", eos: str = "</s>") -> str:
    """The prompt as text with literal BOS/EOS markers (for display and templates)."""
    return "".join(bos + text + (eos if e else "") for text, e in chat_segments(messages))


def chat_prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The prompt as token ids, BOS/EOS as ids (never as text the tokenizer might split)."""
    ids = []
    for text, ends in chat_segments(messages):
        ids += tokenizer.encode(text, bos=True)
        if ends:
            ids += tokenizer.eos_ids[:1]
    return ids
