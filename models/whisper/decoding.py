"""Decoding one 30 s window: prompt, logit filters, greedy / sampling / beam search.

Follows openai/whisper decoding.py (v20240930) in structure and transformers' Whisper generate
(v5) in the details that fix the token ids: filter order (suppress-at-begin, suppress, timestamp
rules), the timestamp rules themselves, and beam search's bookkeeping (2 * beams candidates per
step, finished hypotheses scored by sum of log-probs / generated length ** length_penalty, the
early-stop heuristic). The model runs on any ember device; the filters and the search run in numpy
on (beams, vocab) logits, which are small.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

import ember

NEG_INF = -np.inf


@dataclass(frozen=True)
class DecodingOptions:
    task: str = "transcribe"               # or "translate" (multilingual checkpoints)
    language: str | None = None            # None: detect (multilingual) / English (English-only)
    temperature: float = 0.0               # 0: greedy or beam search; > 0: sampling
    beam_size: int | None = None           # None or 1: greedy
    length_penalty: float = 1.0            # beam search: score = sum logprob / length ** penalty
    timestamps: bool = False               # predict <|t|> tokens (no <|notimestamps|> in the prompt)
    suppress_blank: bool = True            # the checkpoint's begin_suppress_tokens at the first step
    suppress_tokens: tuple | None = None   # None: the checkpoint's suppress_tokens
    max_initial_timestamp_index: int | None = None  # None: the checkpoint's (50 = 1.0 s)
    max_length: int | None = None          # roughly the tokens generated; None: the checkpoint's
    sample_len: int | None = None          # at most this many new tokens (overrides max_length)
    prompt: tuple = ()                     # previous-text tokens, sent after <|startofprev|>
    seed: int | None = None                # sampling


@dataclass
class DecodingResult:
    tokens: list                   # generated ids, timestamps included, <|endoftext|> not
    text: str
    language: str | None
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float
    prompt: list = field(default_factory=list)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def log_softmax(x: np.ndarray) -> np.ndarray:  # (..., vocab), float32 as torch computes it
    """The registry's log_softmax (in the page and in deterministic mode its exponentials are the page's kernel:
    the desktop's bits there); a row whose largest logit is not finite keeps numpy's arithmetic."""
    m = x.max(-1, keepdims=True)
    if not np.isfinite(m).all():
        m = np.where(np.isfinite(m), m, 0)
        s = x - m
        return s - np.log(np.exp(s).sum(-1, keepdims=True))
    return ember.log_softmax(ember.from_numpy(x), -1).numpy()


# ---------------------------------------------------------------------------------------------
# Logit filters: (logits (batch, vocab) float32, generated tokens per row) -> logits, in place
# ---------------------------------------------------------------------------------------------

class SuppressAtBegin:
    def __init__(self, tokens):
        self.tokens = np.asarray(sorted(tokens), np.int64)

    def __call__(self, logits, generated):
        if len(generated[0]) == 0:
            logits[:, self.tokens] = NEG_INF


class SuppressTokens:
    def __init__(self, tokens):
        self.tokens = np.asarray(sorted(tokens), np.int64)

    def __call__(self, logits, generated):
        logits[:, self.tokens] = NEG_INF


class ApplyTimestampRules:
    """Timestamps come in pairs (except right before <|endoftext|>), never decrease, the first one
    is at most max_initial; when the timestamps together outweigh every text token, take one."""

    def __init__(self, eot, no_timestamps, timestamp_begin, max_initial_index):
        self.eot, self.no_timestamps, self.begin = eot, no_timestamps, timestamp_begin
        self.max_initial = max_initial_index
        self.logprobs = None  # the last call's log_softmax, where it left the logits as they were when taken

    def __call__(self, logits, generated):
        logits[:, self.no_timestamps] = NEG_INF
        for k, seq in enumerate(generated):
            last = len(seq) >= 1 and seq[-1] >= self.begin
            penultimate = len(seq) < 2 or seq[-2] >= self.begin
            if last:
                if penultimate:  # a closed pair: text must follow
                    logits[k, self.begin:] = NEG_INF
                else:  # an opened segment: close it or end
                    logits[k, :self.eot] = NEG_INF
            stamps = [t for t in seq if t >= self.begin]
            if stamps:  # no going back in time (nor repeating <|0.00|>)
                floor = stamps[-1] if (last and not penultimate) else stamps[-1] + 1
                logits[k, self.begin:floor] = NEG_INF
            if len(seq) == 0:
                logits[k, :self.begin] = NEG_INF
                if self.max_initial is not None:
                    logits[k, self.begin + self.max_initial + 1:] = NEG_INF
        logprobs = log_softmax(logits)
        ts = logprobs[:, self.begin:]
        m = ts.max(-1, keepdims=True)
        with np.errstate(divide="ignore"):
            ts_logprob = (np.log(np.exp(ts - np.where(np.isfinite(m), m, 0)).sum(-1)) + m[:, 0])
        text_max = logprobs[:, :self.begin].max(-1)
        later = ts_logprob > text_max
        logits[later, :self.begin] = NEG_INF
        # a sampler after this (the last filter) reads these instead of a second pass over the vocabulary
        self.logprobs = None if later.any() else logprobs


# ---------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------

class WindowDecoder:
    """Decodes one window of audio features with a model, its config and tokenizer."""

    def __init__(self, model, tokenizer, options: DecodingOptions):
        self.model, self.tokenizer, self.options = model, tokenizer, options
        cfg = tokenizer.config
        self.eot = cfg.special.eot
        self.filters = []
        if options.suppress_blank and cfg.begin_suppress_tokens:
            self.filters.append(SuppressAtBegin(cfg.begin_suppress_tokens))
        suppress = cfg.suppress_tokens if options.suppress_tokens is None else options.suppress_tokens
        if suppress:
            self.filters.append(SuppressTokens(suppress))
        if options.timestamps:
            mi = cfg.max_initial_timestamp_index if options.max_initial_timestamp_index is None \
                else options.max_initial_timestamp_index
            self.filters.append(ApplyTimestampRules(self.eot, cfg.special.no_timestamps,
                                                    cfg.special.timestamp_begin, mi))
        self.n_ctx = model.decoder.n_ctx

    def prompt(self, language):
        p = self.tokenizer.sot_sequence(language, self.options.task, self.options.timestamps)
        if self.options.prompt:  # as openai: <|startofprev|> + the last n_ctx // 2 - 1 tokens
            prev = list(self.options.prompt)[-(self.n_ctx // 2 - 1):]
            p = [self.tokenizer.sot_prev] + prev + p
        return p

    def step(self, tokens, cross, cache, positions=(-1,)):
        """Feed tokens (batch, T) -> (logits (batch, len(positions), vocab) numpy float32, cache).
        Index tensors stay on the host: their bounds are checked there and they are uploaded with the
        lookup, so a step on a GPU reads back only its logits (a device index would read its min/max back)."""
        hidden, cache = self.model.decoder(ember.tensor(np.asarray(tokens, np.int64)), cross, cache)
        if positions == (-1,):
            hidden = hidden[:, -1:]
        else:
            hidden = hidden.index_select(1, ember.tensor(np.asarray(positions, np.int64)))
        logits = self.model.decoder.logits(hidden).float().numpy()
        return logits, cache

    def apply_filters(self, logits, generated):
        for f in self.filters:
            f(logits, generated)
        return logits

    def filtered_logprobs(self, logits):
        """log_softmax of the logits apply_filters just gave: the timestamp rule's own where it was the last filter
        and left them unchanged after taking it (the same call on the same values: the same bits; ~0.35 ms a
        token in the page)."""
        rule = self.filters[-1] if self.filters else None
        if isinstance(rule, ApplyTimestampRules) and rule.logprobs is not None:
            logprobs, rule.logprobs = rule.logprobs, None
            return logprobs
        return log_softmax(logits)

    def run(self, audio_features, language=None, temperature=None) -> DecodingResult:
        """audio_features (1, 1500, d) of one window -> DecodingResult. Records no gradients: a caller outside
        no_grad would otherwise take the recording paths (on webgpu unfused: 1,455 dispatches vs 453 for 12 tokens)."""
        with ember.no_grad():
            return self._run(audio_features, language, temperature)

    def _run(self, audio_features, language, temperature) -> DecodingResult:
        opts = self.options
        temperature = opts.temperature if temperature is None else temperature
        cross = self.model.decoder.cross_kv(audio_features)  # once per window
        prompt = self.prompt(language)
        # as transformers: the length limit counts generated tokens plus up to n_ctx // 2 - 1 of the
        # prompt, capped by the decoder's context
        limit = opts.max_length or self.tokenizer.config.max_length or self.n_ctx
        max_length = min(limit + min(self.n_ctx // 2 - 1, len(prompt)), self.n_ctx)
        if opts.sample_len is not None:
            max_length = min(len(prompt) + opts.sample_len, self.n_ctx)
        if len(prompt) >= max_length:
            raise ValueError(f"ember: the decoder prompt has {len(prompt)} tokens, max_length is {max_length}")
        sot_index = prompt.index(self.tokenizer.sot)
        no_speech = self.tokenizer.no_speech
        if opts.beam_size and opts.beam_size > 1 and temperature == 0:
            tokens, sum_logprob, first = self.beam_search(cross, prompt, max_length, sot_index)
        else:
            tokens, sum_logprob, first = self.sample(cross, prompt, max_length, sot_index, temperature)
        no_speech_prob = float(np.exp(log_softmax(first)[no_speech])) if no_speech is not None else 0.0
        text = self.tokenizer.decode(tokens)
        n = len(tokens)
        return DecodingResult(tokens, text, language, sum_logprob / (n + 1), no_speech_prob, temperature,
                              compression_ratio(text), prompt)

    def sample(self, cross, prompt, max_length, sot_index, temperature):
        """Greedy (temperature 0) or sampling; -> (tokens, sum of logprobs, raw logits at sot)."""
        rng = np.random.default_rng(self.options.seed)
        positions = (sot_index, len(prompt) - 1) if sot_index != len(prompt) - 1 else (-1,)
        logits, cache = self.step([prompt], cross, None, positions)
        first = logits[0, 0].copy()  # raw logits at <|startoftranscript|>, for no_speech_prob
        logits = logits[:, -1]
        generated, total = [], 0.0
        while True:
            logits = self.apply_filters(logits, [generated])
            logp = self.filtered_logprobs(logits)[0]
            if temperature == 0:
                tok = int(np.argmax(logits[0]))
            else:
                p = np.exp(log_softmax(logits / temperature)[0].astype(np.float64))
                tok = int(rng.choice(p.size, p=p / p.sum()))
            total += float(logp[tok])
            if tok == self.eot:
                break
            generated.append(tok)
            if len(prompt) + len(generated) >= max_length:
                break
            logits, cache = self.step([[tok]], cross, cache)
            logits = logits[:, -1]
        return generated, total, first

    def beam_search(self, cross, prompt, max_length, sot_index):
        """transformers' beam search (length_penalty, early_stopping=False) on one window."""
        nb, lp = self.options.beam_size, np.float32(self.options.length_penalty)
        keep = 2 * nb  # candidates per step: enough that nb stay open even if nb end here
        positions = (sot_index, len(prompt) - 1) if sot_index != len(prompt) - 1 else (-1,)
        logits, cache = self.step([prompt] * nb, cross, None, positions)
        first = logits[0, 0].copy()
        logits = logits[:, -1]
        f32 = np.float32
        running = [[] for _ in range(nb)]
        running_scores = np.full(nb, -1e9, f32)
        running_scores[0] = 0  # all beams start identical: keep one
        done_tokens = [None] * nb
        done_scores = np.full(nb, -1e9, f32)
        done_flag = np.zeros(nb, bool)
        cur_len, plen = len(prompt), len(prompt)
        unsatisfied = True
        while True:
            logp = self.apply_filters(log_softmax(logits), running)  # (nb, vocab)
            vocab = logp.shape[1]
            acc = (logp + running_scores[:, None]).reshape(-1)  # (nb * vocab,)
            top = np.argpartition(-acc, keep)[:keep]
            top = top[np.lexsort((top, -acc[top]))]  # descending score, ties by index (as torch.topk)
            top_scores = acc[top].astype(f32)
            beam_of, tok_of = top // vocab, top % vocab
            cand = [running[b] + [int(t)] for b, t in zip(beam_of, tok_of)]
            hits = (tok_of == self.eot) | (cur_len + 1 >= max_length)
            # finished: the top-nb candidates that just hit a stop, scored by length
            norm = top_scores / f32(cur_len + 1 - plen) ** lp
            ok = hits & (np.arange(keep) < nb) & unsatisfied
            merged_scores = np.concatenate([done_scores, np.where(ok, norm, f32(-1e9) + norm)])
            merged_tokens = done_tokens + cand
            merged_flag = np.concatenate([done_flag, ok])
            order = np.lexsort((np.arange(merged_scores.size), -merged_scores))[:nb]
            done_scores, done_flag = merged_scores[order].astype(f32), merged_flag[order]
            done_tokens = [merged_tokens[i] for i in order]
            # running: the best nb candidates that did not stop
            open_scores = (top_scores + np.where(hits, f32(-1e9), f32(0))).astype(f32)
            sel = np.lexsort((np.arange(keep), -open_scores))[:nb]
            running = [cand[i] for i in sel]
            running_scores = open_scores[sel]
            cur_len += 1
            worst_done = np.where(done_flag, done_scores.min(), f32(-1e9))
            best_possible = running_scores[0] / f32(cur_len - plen) ** lp
            unsatisfied = unsatisfied and bool(np.any(best_possible > worst_done))
            if not unsatisfied or hits.all() or cur_len >= max_length:
                break
            cache.reorder(beam_of[sel])  # each running beam continues its parent's keys and values (host index)
            logits, cache = self.step([[c[-1]] for c in running], cross, cache)
            logits = logits[:, -1]
        best = done_tokens[0] if done_flag[0] else running[0]
        tokens = [t for t in best if t != self.eot]
        length = len(best)
        return tokens, float(done_scores[0] * f32(length) ** lp if done_flag[0] else running_scores[0]), first


def detect_language(model, tokenizer, audio_features) -> tuple[str, dict]:
    """Most likely language of a window (multilingual checkpoints): the decoder's distribution over
    language tokens after <|startoftranscript|> -> (code, {code: probability})."""
    table = tokenizer.config.special.lang_to_id
    if not table:
        raise ValueError("ember: this checkpoint is English-only; it has no language tokens to detect")
    cross = model.decoder.cross_kv(audio_features)
    hidden, _ = model.decoder(ember.tensor([[tokenizer.sot]]), cross)  # a host index (see WindowDecoder.step)
    logits = model.decoder.logits(hidden[:, -1:]).float().numpy()[0, 0]
    ids = np.array(list(table.values()))
    logp = log_softmax(logits[ids][None])[0]
    probs = {t[2:-2]: float(np.exp(v)) for t, v in zip(table, logp)}
    return max(probs, key=probs.get), probs
