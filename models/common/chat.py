"""Chat with a causal LM that carries a chat template: the conversation rendered by its template (ember's
sandboxed Jinja), the KV cache kept between turns so that only what is new is prefilled, replies streamed as
text, stopped at the model's end-of-turn tokens, at stop strings or at max_tokens, optionally constrained to a
grammar (ember.grammar: JSON schemas, choices, regexes).

    engine = ChatEngine(model, tokenizer)             # the template from tokenizer.chat_template
    chat = ChatSession(engine, system="You are terse.")
    for piece in chat.send("What is the capital of France?", max_tokens=64):
        print(piece, end="")
    chat.last.prefill_tokens, chat.last.cached_tokens   # the second turn prefills only its own tokens

The cache (PrefixCache) holds the ids it has seen; a new prompt reuses its longest common prefix with them (the
conversation so far, and the reply as generated), truncates the rest and prefills the remainder. Any prompt
works — the OpenAI server sends whole conversations — and a prompt that shares nothing starts over.

Context policy (ChatSession): when the rendered conversation would leave fewer than min(max_tokens, context/2)
positions for the reply, the oldest messages after the system message are dropped, a user turn with the
replies that follow it at a time, until it fits; if the system message and the last user message alone do not
fit, ContextFullError says how many tokens they need. A reply that fills the context ends with finish_reason
"length" (stopped "context"), never an error. ChatEngine alone (the API server) refuses a prompt that does not
fit with ContextFullError, as OpenAI's context_length_exceeded.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ember.errors import EmberError

from .generate import SamplingParams, TextStream, generate


class ChatError(EmberError, ValueError):
    """A chat request ember cannot serve (names what is wrong)."""


class ContextFullError(ChatError):
    def __init__(self, message: str, prompt_tokens: int, context: int):
        super().__init__(message)
        self.prompt_tokens, self.context = prompt_tokens, context


def common_prefix(a, b) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """A model's KV cache and the ids it holds, reused across prompts that share a prefix."""

    def __init__(self, model, max_len: int | None = None):
        self.model, self.max_len, self.cache, self.ids = model, max_len, None, []

    def reset(self):
        """Forget everything (the model's weights changed: cached keys and values are stale)."""
        self.cache, self.ids = None, []

    def start(self, prompt_ids) -> tuple:
        """(cache, the prompt's ids still to run, how many ids the cache already held). The last prompt id always
        runs: its logits pick the reply's first token."""
        n = min(common_prefix(self.ids, prompt_ids), len(prompt_ids) - 1)
        if self.cache is None or n <= 0 or not self.cache.truncate(n):
            self.cache, n = self.model.new_cache(self.max_len), 0
        self.ids = list(prompt_ids[:n])
        return self.cache, list(prompt_ids[n:]), n

    def finish(self, prompt_ids, generated):
        """After a reply: the ids now in the cache (the prompt, and the generated ids that were fed back)."""
        self.ids = (list(prompt_ids) + list(generated))[:self.cache.pos]


@dataclass
class ChatResult:
    text: str = ""
    tokens: list = field(default_factory=list)
    finish_reason: str = ""         # OpenAI's: "stop" (end of turn or a stop string) | "length"
    stopped: str = ""               # ember's: "eos" | "stop" | "length" | "context" | "abort"
    prompt_tokens: int = 0          # the whole rendered prompt
    cached_tokens: int = 0          # of those, already in the KV cache
    prefill_tokens: int = 0         # of those, run this turn
    ttft_s: float = 0.0             # request to first token (render, tokenize, prefill, first pick)
    tokens_per_s: float = 0.0       # decode speed after the first token
    dropped_messages: int = 0       # messages the context policy left out

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


class Reply:
    """One reply being generated: iterating yields its text pieces (UTF-8 safe; a possible stop string held
    back); `.result` (ChatResult) is complete once the iteration ends; `.abort()` stops it at the next token."""

    def __init__(self, engine, prompt_ids, max_tokens: int, params: SamplingParams, stop=(), constraint=None,
                 on_done=None, started: float | None = None, dropped: int = 0):
        self.engine, self.prompt_ids, self.on_done = engine, list(prompt_ids), on_done
        self.max_tokens, self.params, self.stop, self.constraint = max_tokens, params, list(stop), constraint
        self.started = time.perf_counter() if started is None else started
        self.result = ChatResult(prompt_tokens=len(self.prompt_ids), dropped_messages=dropped)
        self._stream = None

    def abort(self):
        if self._stream is not None:
            self._stream.abort()

    def progress(self) -> tuple[int, float]:
        """(tokens generated so far, decode tokens/s so far), for a streaming display."""
        if self._stream is None:
            return 0, 0.0
        st = self._stream.stats
        return len(st.tokens), st.tokens_per_s

    def __iter__(self):
        eng, res = self.engine, self.result
        cache, todo, reused = eng.prefix.start(self.prompt_ids)
        res.cached_tokens, res.prefill_tokens = reused, len(todo)
        room = cache.max_len - len(self.prompt_ids)
        gen = generate(eng.model, todo, min(self.max_tokens, room), self.params, eng.tokenizer.eos_ids,
                       cache=cache, seen=self.prompt_ids, constraint=self.constraint)
        self._stream = TextStream(gen, eng.tokenizer, self.stop)
        pieces, first = [], True
        try:
            for piece in self._stream:
                if first:
                    res.ttft_s, first = time.perf_counter() - self.started, False
                pieces.append(piece)
                yield piece
        finally:
            st = gen.stats
            eng.prefix.finish(self.prompt_ids, st.tokens)
            if first:
                res.ttft_s = time.perf_counter() - self.started
            res.text, res.tokens, res.tokens_per_s = "".join(pieces), list(st.tokens), st.tokens_per_s
            res.stopped = st.stopped or "abort"
            if st.stopped == "length" and self.max_tokens > room:
                res.stopped = "context"
            res.finish_reason = "stop" if res.stopped in ("eos", "stop") else "length"
            if self.on_done is not None:
                self.on_done(res)

    def text(self) -> str:
        """Run to the end; the whole reply."""
        for _ in self:
            pass
        return self.result.text


class ChatEngine:
    """A model, its tokenizer and chat template, and one PrefixCache: renders conversations and generates replies."""

    def __init__(self, model, tokenizer, template=None, context: int | None = None):
        """context: at most this many positions (prompt and reply; default and most: the model's own)."""
        self.model, self.tokenizer = model, tokenizer
        self.template = template if template is not None else getattr(tokenizer, "chat_template", None)
        if self.template is None:
            raise ChatError("ember: this model carries no chat template (a base model: it continues text); use "
                            "`ember generate` for completion, or give it a template")
        self.context = min(int(context or model.max_seq_len), int(model.max_seq_len))
        self.prefix = PrefixCache(model, self.context)

    def prompt_ids(self, messages, add_generation_prompt: bool = True, tools=None) -> list[int]:
        """The conversation rendered by the template and tokenized with its special tokens parsed (the template
        writes BOS itself where the model wants one)."""
        text = self.template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        return self.tokenizer.encode(text, bos=False, special=True)

    def reply(self, messages, max_tokens: int = 256, params: SamplingParams | None = None, stop=(),
              constraint=None, tools=None) -> Reply:
        """A Reply to `messages` (the whole conversation, as OpenAI's API sends it); a prompt that leaves no room
        for one token is a ContextFullError."""
        started = time.perf_counter()
        ids = self.prompt_ids(messages, tools=tools)
        if len(ids) >= self.context:
            raise ContextFullError(f"ember: this model's context is {self.context} tokens; the messages take "
                                   f"{len(ids)}", len(ids), self.context)
        return Reply(self, ids, max_tokens, params or SamplingParams(temperature=0.0), stop, constraint,
                     started=started)


class ChatSession:
    """A conversation: its messages (the system message first, if any), replies appended as they finish."""

    def __init__(self, engine: ChatEngine, system: str | None = None):
        self.engine = engine
        self.messages = [{"role": "system", "content": system}] if system else []
        self.last: ChatResult | None = None

    def clear(self):
        """Back to the system message (the cache keeps its prefix: the next turn prefills only the new one)."""
        self.messages = self.messages[:1] if self.messages and self.messages[0]["role"] == "system" else []

    def send(self, content: str, max_tokens: int = 256, params: SamplingParams | None = None, stop=(),
             constraint=None) -> Reply:
        """Add the user's message and reply to it (the reply joins the conversation when it ends)."""
        self.messages.append({"role": "user", "content": content})
        return self._reply(max_tokens, params, stop, constraint)

    def regenerate(self, max_tokens: int = 256, params: SamplingParams | None = None, stop=(), constraint=None):
        """Drop the last reply and answer the last user message again."""
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages.pop()
        if not self.messages or self.messages[-1]["role"] != "user":
            raise ChatError("ember: there is no user message to answer")
        return self._reply(max_tokens, params, stop, constraint)

    def _reply(self, max_tokens, params, stop, constraint) -> Reply:
        started = time.perf_counter()
        ids, dropped = self.fit(max_tokens)

        def done(res: ChatResult):
            self.last = res
            self.messages.append({"role": "assistant", "content": res.text})
        return Reply(self.engine, ids, max_tokens, params or SamplingParams(temperature=0.0), stop, constraint,
                     on_done=done, started=started, dropped=dropped)

    def fit(self, max_tokens: int) -> tuple[list[int], int]:
        """(prompt ids, messages dropped) under the context policy (see the module's docstring)."""
        ctx = self.engine.context
        want = min(max_tokens, ctx // 2)
        head = 1 if self.messages and self.messages[0]["role"] == "system" else 0
        dropped = 0
        while True:
            ids = self.engine.prompt_ids(self.messages)
            if len(ids) + want <= ctx:
                return ids, dropped
            turns = [i for i in range(head + 1, len(self.messages)) if self.messages[i]["role"] == "user"]
            if not turns:  # only the system message and the last user turn remain
                self.messages.pop()
                raise ContextFullError(f"ember: the last message needs {len(ids)} tokens with the system message, "
                                       f"and the reply {want} more; this model's context is {ctx} tokens",
                                       len(ids), ctx)
            dropped += turns[0] - head
            del self.messages[head:turns[0]]
