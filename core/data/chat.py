"""Chat-formatted training data: JSON Lines of conversations, one `{"messages": [{"role", "content"}, ...]}` object
a line, rendered by the model's chat template and tokenized, with labels only on the assistant turns.

    convs = read_chat_jsonl("data.jsonl")                     # [(line number, messages)], checked
    ds = ChatExamples(convs, template.render, encode, max_tokens=512, where="data.jsonl")
    inputs, labels = ds[0]                                    # (T,) int64 each; labels -100 off the assistant turns

Which tokens are the assistant's: for the assistant message i, the template's text for messages[:i] with the
generation prompt and its text for messages[:i + 1] are both prefixes of the whole conversation's text; the
characters between the two are the turn (the reply and whatever the template closes it with, e.g. ChatML's
`<|im_end|>`), the generation prompt before them is not. (A conversation that opens with an assistant message,
under a template that writes a default system message only once there is a message, takes the text before that
reply's content instead of the empty conversation's generation prompt.) The conversation's text is tokenized
piece by piece at those boundaries (the prompt part as the chat tokenizes a prompt), so a turn's tokens are
exactly the difference of the two prefixes' token counts. A template that does not render a conversation
prefix-wise (one that rewrites earlier turns) is refused with an error naming the line.

The data layer knows no model: `render(messages, add_generation_prompt)` and `encode(text) -> ids` come from the
caller (ember.models.text.finetune passes the tokenizer's chat template and encoder).
"""
from __future__ import annotations

import json
import os

import numpy as np

from ..errors import EmberError, FormatError, LimitError
from .dataset import Dataset

IGNORE_INDEX = -100          # the label cross_entropy skips (its default ignore_index), as torch and transformers
MAX_LINE_BYTES = 4 << 20     # one conversation
MAX_FILE_BYTES = 1 << 30
MAX_MESSAGES = 10_000        # in one conversation
ROLES = ("system", "user", "assistant", "tool")


class ChatDataError(FormatError):
    """A chat JSONL file or conversation that cannot train: names the file, the line and what is wrong."""


def _message_error(m, j: int) -> str | None:
    if not isinstance(m, dict):
        return f"message {j} is not an object"
    role = m.get("role")
    if role is None:
        return f"message {j} has no 'role'"
    if role not in ROLES:
        return f"message {j}: role {role!r} is not one of {', '.join(ROLES)}"
    if not isinstance(m.get("content"), str):
        return f"message {j} ({role}): 'content' must be a string"
    return None


def parse_chat_line(line: str, where: str) -> list[dict]:
    """One line's messages, checked: an object with a non-empty 'messages' list of {"role", "content"} objects
    (roles system, user, assistant, tool; content a string) holding at least one assistant message."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ChatDataError(f"ember: {where}: not JSON ({e})") from None
    if not isinstance(obj, dict) or "messages" not in obj:
        raise ChatDataError(f"ember: {where}: expected an object with a 'messages' list")
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise ChatDataError(f"ember: {where}: 'messages' must be a non-empty list")
    if len(msgs) > MAX_MESSAGES:
        raise LimitError(where, "the number of messages", len(msgs), MAX_MESSAGES)
    for j, m in enumerate(msgs):
        err = _message_error(m, j)
        if err:
            raise ChatDataError(f"ember: {where}: {err}")
    if not any(m["role"] == "assistant" for m in msgs):
        raise ChatDataError(f"ember: {where}: no assistant message: nothing to learn from this conversation")
    return [{"role": m["role"], "content": m["content"]} for m in msgs]


def read_chat_jsonl(path, max_line_bytes: int = MAX_LINE_BYTES) -> list[tuple[int, list[dict]]]:
    """[(line number, messages)] of a chat JSONL file (blank lines skipped); any bad line is a ChatDataError
    naming the file and the line."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise LimitError(path, "the file's size", f"{size:,}", f"{MAX_FILE_BYTES:,}", unit=" bytes")
    with open(path, "rb") as f:
        return _parse_lines(iter(lambda: f.readline(max_line_bytes + 1), b""), path, max_line_bytes)


def parse_chat_jsonl(text: str, where: str = "the chat data",
                     max_line_bytes: int = MAX_LINE_BYTES) -> list[tuple[int, list[dict]]]:
    """read_chat_jsonl for JSONL already in memory (the page's pasted or dropped file); `where` names it in errors."""
    if len(text) > MAX_FILE_BYTES:
        raise LimitError(where, "the text's length", f"{len(text):,}", f"{MAX_FILE_BYTES:,}", unit=" characters")
    return _parse_lines((line.encode("utf-8", "surrogatepass") for line in text.splitlines(keepends=True)), where,
                        max_line_bytes)


def _parse_lines(raw_lines, where: str, max_line_bytes: int) -> list[tuple[int, list[dict]]]:
    """The conversations of raw UTF-8 lines (a line past max_line_bytes arrives cut: it is refused, not read whole)."""
    out = []
    for n, raw in enumerate(raw_lines, 1):
        if len(raw.rstrip(b"\r\n")) > max_line_bytes:
            raise LimitError(f"{where} line {n}", "the line's length", f"{len(raw):,}+", max_line_bytes,
                             unit=" bytes")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ChatDataError(f"ember: {where} line {n}: not UTF-8 ({e.reason} at byte {e.start})") from None
        if line.strip():
            out.append((n, parse_chat_line(line, f"{where} line {n}")))
    if not out:
        raise ChatDataError(f"ember: {where}: no conversations (it is empty)")
    return out


def assistant_spans(messages, render, where: str = "conversation") -> tuple[str, list[tuple[int, int]]]:
    """(the conversation's text, [(start, end) character spans of the assistant turns])."""
    def text(msgs, gen):
        try:
            return render(msgs, add_generation_prompt=gen)
        except EmberError as e:
            raise ChatDataError(f"ember: {where}: the chat template refuses it: {e}") from None
    full = text(messages, False)
    spans, done = [], 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head, turn = text(messages[:i], True), text(messages[:i + 1], False)
        if i == 0 and not turn.startswith(head):  # templates that open a conversation (a default system message)
            head = _opening(messages[0], text)     # only once it has a message
        if not (turn.startswith(head) and full.startswith(turn)) or len(head) < done:
            raise ChatDataError(f"ember: {where}: the chat template does not render this conversation turn by turn "
                                f"(its text up to message {i} is not a prefix of the whole), so the assistant's "
                                "tokens cannot be told apart")
        spans.append((len(head), len(turn)))
        done = len(turn)
    return full, spans


SENTINEL = "\x00ember-assistant-content\x00"


def _opening(first: dict, text) -> str:
    """The text a conversation that starts with the assistant puts before its first reply: the template's
    rendering of that message with a sentinel for its content, cut at the sentinel."""
    probe = text([{**first, "content": SENTINEL}], False)
    return probe[:probe.index(SENTINEL)] if SENTINEL in probe else ""


def masked_ids(messages, render, encode, where: str = "conversation") -> tuple[np.ndarray, np.ndarray]:
    """(ids (n,) int64, mask (n,) bool: True on the assistant turns' tokens) of one conversation."""
    full, spans = assistant_spans(messages, render, where)
    ids, mask, at = [], [], 0
    for start, end in spans:
        for a, b, trained in ((at, start, False), (start, end, True)):
            if b > a:
                piece = list(encode(full[a:b]))
                ids += piece
                mask += [trained] * len(piece)
        at = end
    if at < len(full):
        piece = list(encode(full[at:]))
        ids += piece
        mask += [False] * len(piece)
    return np.asarray(ids, np.int64), np.asarray(mask, bool)


class ChatExamples(Dataset):
    """`ds[i]` = (inputs (T,), labels (T,)) int64 of conversation i: inputs its ids but the last, labels the next
    ids where they are an assistant's and IGNORE_INDEX elsewhere; at most max_tokens long (the rest is cut)."""

    def __init__(self, conversations, render, encode, max_tokens: int, where: str = "data"):
        """conversations: [(line number, messages)] as read_chat_jsonl gives, or plain message lists."""
        if max_tokens < 1:
            raise ChatDataError(f"ember: max_tokens must be at least 1, got {max_tokens}")
        self.examples = []
        for k, conv in enumerate(conversations):
            line, msgs = conv if isinstance(conv, tuple) else (None, conv)
            at = f"{where} line {line}" if line is not None else f"{where} conversation {k}"
            ids, mask = masked_ids(msgs, render, encode, at)
            total = len(ids)
            ids, mask = ids[:max_tokens + 1], mask[:max_tokens + 1]
            labels = np.where(mask[1:], ids[1:], IGNORE_INDEX)
            if not (labels != IGNORE_INDEX).any():
                raise ChatDataError(f"ember: {at}: no assistant token within the first {max_tokens} tokens "
                                    f"(the conversation has {total}; raise the block size)")
            self.examples.append((ids[:-1], labels))
        if not self.examples:
            raise ChatDataError(f"ember: {where}: no conversations")

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, index):
        return self.examples[index]
