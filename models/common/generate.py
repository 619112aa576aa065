"""Text generation for every causal LM of the zoo (anything with forward(tokens, cache, last_only,
attention_mask) and new_cache()): the prompt in one batched forward, then one token at a time against the
KV cache. Sampling runs on the host with transformers' semantics, in its order: repetition penalty,
temperature, top-k, top-p (temperature 0 = greedy); probabilities from ember's softmax (float32, as transformers
samples), the nucleus found without sorting the vocabulary, one uniform number a draw. `stream()` yields UTF-8-safe
text pieces and stops at stop strings; `on_token` is called with each id as it is chosen; `generate_batch` left-pads prompts of
different lengths and decodes them together.

    for piece in stream(model, tok, "Once upon a time", max_new_tokens=64, temperature=0.8, top_p=0.9, seed=1):
        print(piece, end="", flush=True)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

import ember
from ember.errors import EmberError


class SamplingError(EmberError, ValueError):
    """Logits no token can be drawn from."""


@dataclass
class SamplingParams:
    temperature: float = 1.0       # 0 -> greedy (argmax)
    top_k: int = 0                 # 0 -> off
    top_p: float = 1.0             # 1 -> off
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0 or self.repetition_penalty <= 0:
            raise ValueError(f"ember: invalid sampling parameters {self}")


# ============================================================================ logit filters (numpy)

def apply_repetition_penalty(logits: np.ndarray, seen, penalty: float) -> np.ndarray:
    """CTRL's penalty as transformers applies it: seen tokens' logits / p if positive, * p if negative."""
    if penalty == 1.0 or len(seen) == 0:
        return logits
    out = logits.copy()
    idx = np.unique(np.asarray(seen, np.int64))
    v = out[idx]
    out[idx] = np.where(v < 0, v * penalty, v / penalty)
    return out


def top_k_filter(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the k largest logits (ties with the k-th kept), others -> -inf."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = np.partition(logits, -k)[-k]
    return np.where(logits < kth, -np.inf, logits)


def top_k_positions(z: np.ndarray, k: int) -> np.ndarray:
    """Positions (ascending) of the k largest of z, ties with the k-th kept (top_k_filter's): the k-th largest
    is found among the values above a threshold that holds at least k of them (8 below the largest, then lower),
    not by partitioning the whole vocabulary (1.3 ms a token for 262k in the page)."""
    c = _above(z, lambda c: c.size >= k)
    v = z[c]
    return c[v >= np.partition(v, -k)[-k]] if c.size > k else c


def _above(z, enough):
    """Positions (ascending) of the z at least `depth` below the largest, depth 8, 16, ... 1024, the first set
    that is `enough`; else every position."""
    top = z.max()
    for depth in (8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0):
        c = np.flatnonzero(z >= top - depth)
        if c.size == z.size or enough(c):
            return c
    return np.arange(z.size)


def top_p_filter(logits: np.ndarray, p: float) -> np.ndarray:
    """Nucleus filter: drop the least likely tokens whose cumulative probability is <= 1 - p (at least one kept)."""
    if p >= 1.0:
        return logits
    s = logits.astype(np.float64)
    keep = nucleus(logits, np.exp(s - s.max()), p)
    out = np.full_like(logits, -np.inf)
    out[keep] = logits[keep]
    return out


def nucleus(z: np.ndarray, weights: np.ndarray, p: float) -> np.ndarray:
    """Positions (ascending) of the tokens top-p keeps, as transformers' TopPLogitsWarper: in ascending order of
    the logits z (ties: lower position first, a stable sort), a token goes when the probability up to and with it
    is <= 1 - p, i.e. when the mass above it is >= p; so the kept are the tokens whose mass above (largest first)
    is below p of the total. weights: probabilities up to a factor (float32 or float64), by position.
    Sorting the whole vocabulary cost ~30 ms a token for Gemma 3's 262k; the tokens above a threshold whose
    mass reaches p already hold every kept one (any token below has all of theirs above it), so only those are
    sorted: the threshold starts 8 below the largest logit and moves down until they do."""
    target = p * weights.sum(dtype=np.float64)
    c = _above(z, lambda c: weights[c].sum(dtype=np.float64) >= target)
    c = c[np.lexsort((-c, -z[c]))]  # largest first; ties: the later position first (the stable order reversed)
    mass = np.cumsum(weights[c], dtype=np.float64)
    above = np.concatenate(([0.0], mass[:-1]))
    return np.sort(c[above < target])


def pick(weights: np.ndarray, u: float) -> int:
    """The position a uniform u in [0, 1) draws from weights (probabilities up to a factor, >= 0): the first whose
    cumulative weight (float64, in position order) exceeds u times the total, as numpy's Generator.choice(p=)
    draws with its one uniform. A long array (a vocabulary) in blocks of 1024: their sums, then one block's."""
    n = weights.size
    if n <= 4 * _PICK_BLOCK:
        cdf = np.cumsum(weights, dtype=np.float64)
        i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        return _last_weighted(weights, min(i, n - 1))
    starts = np.arange(0, n, _PICK_BLOCK)
    blocks = np.cumsum(np.add.reduceat(weights, starts, dtype=np.float64))
    t = u * blocks[-1]
    b = min(int(np.searchsorted(blocks, t, side="right")), starts.size - 1)
    part = np.cumsum(weights[starts[b]:starts[b] + _PICK_BLOCK], dtype=np.float64)
    if b:
        part += blocks[b - 1]
    i = starts[b] + min(int(np.searchsorted(part, t, side="right")), part.size - 1)
    return _last_weighted(weights, i)


_PICK_BLOCK = 1024


def _last_weighted(weights, i):
    """i, or where rounding carried the draw past the last token with weight (a block's or the array's end), the
    last token before it that has some."""
    while i > 0 and weights[i] <= 0:
        i -= 1
    return i


class Sampler:
    def __init__(self, params: SamplingParams):
        self.p = params
        self.rng = np.random.default_rng(params.seed)

    @property
    def greedy(self) -> bool:
        """The pick is argmax(logits) itself (no penalty, no sampling): a model's greedy_head may give it."""
        return self.p.temperature == 0 and self.p.repetition_penalty == 1.0

    @property
    def top_k_only(self) -> int:
        """k when the draw depends on the k largest logits alone (top-k on, no penalty: a penalty moves logits
        after the top k are known), else 0: a model's topk_head may then compute just those (and a few more)."""
        return self.p.top_k if self.p.temperature > 0 and self.p.repetition_penalty == 1.0 else 0

    def __call__(self, logits: np.ndarray, seen) -> int:
        """logits (vocab,) float -> next token id."""
        logits = apply_repetition_penalty(np.asarray(logits, np.float32), seen, self.p.repetition_penalty)
        if self.p.temperature == 0:
            return int(np.argmax(logits))
        return self.draw(None, logits)

    def draw(self, ids: np.ndarray | None, logits: np.ndarray) -> int:
        """Sample among the tokens `ids` (ascending; None: all of the vocabulary, logits (vocab,)) with these
        logits: all of the vocabulary, or (top_k_only) a subset holding at least every token among the k largest
        (Gemma's topk_head). The filters run on the kept tokens alone, in id order, so both give the same token for
        a seed: probabilities from ember's softmax over the same tokens (float32, as transformers samples; the
        page's exp kernel there), one uniform number drawn either way."""
        logits = np.divide(logits, np.float32(self.p.temperature), dtype=np.float32)  # (one pass, a new array)
        top = logits.max()
        if not np.isfinite(top):
            raise SamplingError(f"ember: sampling: the largest logit is {top} (a model that computed NaN or "
                                f"infinities, or every token suppressed): no distribution to draw from")
        k = self.p.top_k
        if 0 < k < logits.shape[-1]:  # keep the k largest (ties with the k-th kept), as top_k_filter
            keep = top_k_positions(logits, k)
            ids, logits = (keep if ids is None else ids[keep]), logits[keep]
        probs = ember.nn.functional.softmax(ember.tensor(logits), -1).numpy()
        if self.p.top_p < 1.0:
            keep = nucleus(logits, probs, self.p.top_p)
            ids, probs = (keep if ids is None else ids[keep]), probs[keep]
        i = pick(probs, self.rng.random())
        return int(i if ids is None else ids[i])


# ============================================================================ generation

@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    tokens: list = field(default_factory=list)
    prompt_s: float = 0.0
    decode_s: float = 0.0
    stopped: str = ""              # "eos" | "stop" (a stop string) | "length" | "context" | "abort"
    kv_cache_bytes: int = 0

    @property
    def tokens_per_s(self) -> float:
        """Decode speed: generated tokens after the first, per second of incremental decoding."""
        n = len(self.tokens) - 1
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0


class Generation:
    """An iterator of generated token ids with `.abort()` and `.stats`; see generate()."""

    def __init__(self, model, prompt_ids, max_new_tokens, params, stop_ids, on_token=None, cache=None, seen=None,
                 constraint=None):
        if not prompt_ids:
            raise ValueError("ember: generation needs at least one prompt token")
        self.model, self.prompt = model, list(prompt_ids)
        self.max_new, self.sampler = max_new_tokens, Sampler(params)
        self.stop_ids, self.on_token = set(stop_ids), on_token
        self.cache, self.seen, self.constraint = cache, seen, constraint
        self.stats = GenerationStats(prompt_tokens=len(self.prompt))
        self._aborted = False

    def _pick(self, logits, seen) -> int:
        """The next id under the constraint: tokens it does not allow get -inf; the stop ids are allowed only
        where its text may end (none of them: the id it forces instead)."""
        c = self.constraint
        row = logits.numpy()[0, -1].astype(np.float32)                             # (vocab,)
        allowed = c.allowed(row.shape[-1])
        stops = [i for i in self.stop_ids if i < row.shape[-1]]
        if c.accepting():
            allowed = allowed.copy()
            allowed[stops] = True
        if not allowed.any():
            raise c.error(f"ember: the constraint allows no token after {c.text()[-60:]!r}")
        return self.sampler(np.where(allowed, row, -np.inf), seen)

    def abort(self):
        self._aborted = True

    def __iter__(self):
        model, st = self.model, self.stats
        cache = self.cache if self.cache is not None else model.new_cache()
        if cache.pos + len(self.prompt) >= cache.max_len:
            raise ValueError(f"ember: the prompt has {cache.pos + len(self.prompt)} tokens; the context length is "
                             f"{cache.max_len}")
        seen = list(self.seen if self.seen is not None else self.prompt)
        constrained = self.constraint is not None
        # greedy with a model that picks the argmax itself (Gemma 3's tied 262k-row output): the head returns
        # the id, and the logits are never formed
        pick = getattr(model, "greedy_head", None) if self.sampler.greedy and not constrained else None
        kw = {} if pick is None else {"head": pick}
        # sampling from the k largest with a model that finds them without every logit (the same model): its
        # head returns (ids, logits) of a superset of the top k
        top_k, topk_head = self.sampler.top_k_only, getattr(model, "topk_head", None)
        bounded = pick is None and top_k and topk_head is not None and not constrained
        if bounded:
            kw = {"head": lambda x: topk_head(x, top_k)}
        with ember.no_grad():
            t0 = time.perf_counter()
            # token ids stay host tensors: the embedding checks them on the host and uploads them, so a GPU
            # decode step reads back nothing but its logits
            logits = model(ember.tensor([self.prompt]), cache, last_only=True, **kw)        # (1, 1, vocab)
            try:
                for i in range(self.max_new):
                    if self._aborted:
                        st.stopped = "abort"
                        break
                    if pick is not None:
                        tok = logits
                    elif bounded:
                        tok = self.sampler.draw(*logits)
                    elif constrained:
                        tok = self._pick(logits, seen)
                    else:
                        tok = self.sampler(logits.numpy()[0, -1], seen)
                    now = time.perf_counter()
                    if i == 0:
                        st.prompt_s, t0 = now - t0, now
                    else:
                        st.decode_s = now - t0
                    if tok in self.stop_ids:
                        st.stopped = "eos"
                        break
                    st.tokens.append(tok)
                    seen.append(tok)
                    if constrained:
                        self.constraint.advance(tok)
                    if self.on_token is not None:
                        self.on_token(tok)
                    yield tok
                    if i + 1 == self.max_new:
                        st.stopped = "length"
                        break
                    if cache.pos >= cache.max_len:
                        st.stopped = "context"
                        break
                    logits = model(ember.tensor([[tok]]), cache, **kw)                             # (1, 1, vocab)
            finally:  # (read once at the end, however it ends: its ~30-layer sum cost 70 us a token)
                st.kv_cache_bytes = cache.nbytes()


def generate(model, prompt_ids, max_new_tokens=64, params: SamplingParams | None = None, stop_ids=(),
             on_token=None, cache=None, seen=None, constraint=None) -> Generation:
    """Iterate over generated ids: `for t in generate(...)`; stops at a stop id, max_new_tokens or the context.
    on_token(id) is called with each id before it is yielded (a streaming callback). cache: a KV cache holding
    earlier tokens (prompt_ids continue it; a chat's next turn), with seen: every id so far (the repetition
    penalty's history; default prompt_ids). constraint: an ember.grammar constraint (.allowed(vocab) -> bool
    mask, .accepting(), .advance(id)): only the tokens it allows are sampled, a stop id only where it accepts."""
    return Generation(model, prompt_ids, max_new_tokens, params or SamplingParams(), stop_ids, on_token, cache, seen,
                      constraint)


def generate_batch(model, prompts, max_new_tokens=64, params: SamplingParams | None = None, stop_ids=(),
                   pad_id: int = 0, on_token=None) -> list[list[int]]:
    """Generated ids per prompt (list of id lists of any lengths), decoded together: prompts are left-padded
    with pad_id and masked (attention_mask), so each row gives what it gives alone. A row stops at a stop
    id (not included) or max_new_tokens; on_token(row, id) streams. One sampler (one seed) serves all rows."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("ember: generate_batch needs prompts of at least one token each")
    params = params or SamplingParams()
    sampler, stop = Sampler(params), set(stop_ids)
    B, L = len(prompts), max(len(p) for p in prompts)
    cache = model.new_cache()
    if L + max_new_tokens > cache.max_len:
        max_new_tokens = cache.max_len - L
        if max_new_tokens <= 0:
            raise ValueError(f"ember: a prompt has {L} tokens; the context length is {cache.max_len}")
    ids = np.full((B, L), pad_id, np.int64)
    mask = np.zeros((B, L), np.int64)
    for r, p in enumerate(prompts):
        ids[r, L - len(p):], mask[r, L - len(p):] = p, 1
    out, seen, done = [[] for _ in prompts], [list(p) for p in prompts], [False] * B
    with ember.no_grad():
        logits = model(ember.tensor(ids), cache, last_only=True, attention_mask=mask)      # (B, 1, vocab)
        for i in range(max_new_tokens):
            rows = logits.numpy()[:, -1]                                                   # (B, vocab)
            step = np.full((B, 1), pad_id, np.int64)
            for r in range(B):
                if done[r]:
                    continue
                tok = sampler(rows[r], seen[r])
                if tok in stop:
                    done[r] = True
                    continue
                out[r].append(tok)
                seen[r].append(tok)
                step[r, 0] = tok
                if on_token is not None:
                    on_token(r, tok)
            if all(done) or i + 1 == max_new_tokens:
                break
            # a finished row goes on with masked padding so the batch keeps one shape
            mask = np.concatenate([mask, np.array([[0 if d else 1] for d in done], np.int64)], 1)
            logits = model(ember.tensor(step), cache, attention_mask=mask)                 # (B, 1, vocab)
    return out


class TextStream:
    """Iterates text pieces of a Generation; the tokenizer's stream decoder holds back partial UTF-8. With
    stop strings, text that could still begin one is held back; at a stop string the stream ends (the stop
    string and what follows it are not yielded) and stats.stopped is "stop"."""

    def __init__(self, gen: Generation, tokenizer, stop=()):
        self.gen, self.tok, self.stop = gen, tokenizer, [s for s in stop if s]

    def abort(self):
        self.gen.abort()

    @property
    def stats(self) -> GenerationStats:
        return self.gen.stats

    def __iter__(self):
        dec = self.tok.decode_stream()
        held = ""
        for t in self.gen:
            piece = dec.step(t)
            if not piece:
                continue
            if not self.stop:
                yield piece
                continue
            held += piece
            hits = [i for i in (held.find(s) for s in self.stop) if i >= 0]
            if hits:
                if min(hits):
                    yield held[:min(hits)]
                self.gen.stats.stopped = "stop"
                self.gen.abort()
                return
            keep = max((k for s in self.stop for k in range(1, len(s)) if held.endswith(s[:k])), default=0)
            if len(held) > keep:
                yield held[:len(held) - keep]
                held = held[len(held) - keep:]
        if held:
            yield held


def stream(model, tokenizer, prompt: str, max_new_tokens=64, temperature=1.0, top_k=0, top_p=1.0,
           repetition_penalty=1.0, seed=None, bos=True, stop=(), on_token=None) -> TextStream:
    params = SamplingParams(temperature, top_k, top_p, repetition_penalty, seed)
    gen = generate(model, tokenizer.encode(prompt, bos=bos), max_new_tokens, params, tokenizer.eos_ids, on_token)
    return TextStream(gen, tokenizer, stop)
