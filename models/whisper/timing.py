"""Word-level timestamps, as openai/whisper timing.py (v20250625) computes them: the decoder reads the
transcribed tokens once more (teacher-forced), the cross-attention weights of the alignment heads (the heads
whose attention follows the audio) are normalised per frame, median-filtered along time and averaged, and
dynamic time warping finds the monotonic token -> frame path; a word starts where the path first reaches
its first token. Punctuation merges into its neighbour word, and openai's heuristics clip words that run
over pauses and sentence ends.

Alignment heads: the checkpoint's generation_config.json `alignment_heads` when it has them, else openai's
published table for the model size (recognised by its dimensions), else openai's default (every head of the
last half of the decoder layers).
"""
from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

import ember
import ember.nn.functional as F

from ..common.masks import attention_mask

TOKENS_PER_SECOND = 50  # encoder positions per second (20 ms each)
PREPEND_PUNCTUATIONS = "\"'\u201c\u00bf([{-"
APPEND_PUNCTUATIONS = "\"'.\u3002,\uff0c!\uff01?\uff1f:\uff1a\u201d)]}\u3001"
SENTENCE_END_MARKS = ".\u3002!\uff01?\uff1f"
SPACELESS_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}

# openai/whisper's _ALIGNMENT_HEADS (base85 gzipped masks there), as (layer, head) pairs, keyed by the model's
# (decoder layers, decoder heads, width, mel bins, multilingual)
ALIGNMENT_HEADS = {
    (4, 6, 384, 80, False): ((1, 0), (2, 0), (2, 5), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4)),           # tiny.en
    (4, 6, 384, 80, True): ((2, 2), (3, 0), (3, 2), (3, 3), (3, 4), (3, 5)),                             # tiny
    (6, 8, 512, 80, False): ((3, 3), (4, 7), (5, 1), (5, 5), (5, 7)),                                    # base.en
    (6, 8, 512, 80, True): ((3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)),             # base
    (12, 12, 768, 80, False): ((6, 6), (7, 0), (7, 3), (7, 8), (8, 2), (8, 5), (8, 7), (9, 0), (9, 4),   # small.en
                               (9, 8), (9, 10), (10, 0), (10, 1), (10, 2), (10, 3), (10, 6), (10, 11),
                               (11, 2), (11, 4)),
    (12, 12, 768, 80, True): ((5, 3), (5, 9), (8, 0), (8, 4), (8, 7), (8, 8), (9, 0), (9, 7), (9, 9),    # small
                              (10, 5)),
    (24, 16, 1024, 80, False): ((11, 4), (14, 1), (14, 12), (14, 14), (15, 4), (16, 0), (16, 4), (16, 9),  # medium.en
                                (17, 12), (17, 14), (18, 7), (18, 10), (18, 15), (20, 0), (20, 3), (20, 9),
                                (20, 14), (21, 12)),
    (24, 16, 1024, 80, True): ((13, 15), (15, 4), (15, 15), (16, 1), (20, 0), (23, 4)),                  # medium
    # large-v1 and -v2 share their dimensions: a folder without alignment_heads gets v2's (the more used)
    (32, 20, 1280, 80, True): ((10, 12), (13, 17), (16, 11), (16, 12), (16, 13), (17, 15), (17, 16),     # large-v2
                               (18, 4), (18, 11), (18, 19), (19, 11), (21, 2), (21, 3), (22, 3), (22, 9),
                               (22, 12), (23, 5), (23, 7), (23, 13), (25, 5), (26, 1), (26, 12), (27, 15)),
    (32, 20, 1280, 128, True): ((7, 0), (10, 17), (12, 18), (13, 12), (16, 1), (17, 14), (19, 11), (21, 4),  # large-v3
                                (24, 1), (25, 6)),
    (4, 20, 1280, 128, True): ((2, 4), (2, 11), (3, 3), (3, 6), (3, 11), (3, 14)),                       # turbo
}


class WordTimingError(ValueError):
    pass


def alignment_heads(config) -> tuple:
    """(layer, head) pairs for a WhisperConfig: its generation_config's, openai's table, or the last half."""
    d = config.dims
    heads = config.alignment_heads or ALIGNMENT_HEADS.get(
        (d.n_text_layer, d.n_text_head, d.n_text_state, d.n_mels, bool(config.multilingual)))
    if heads is None:
        heads = tuple((layer, h) for layer in range(d.n_text_layer // 2, d.n_text_layer) for h in range(d.n_text_head))
    for layer, h in heads:
        if not (0 <= layer < d.n_text_layer and 0 <= h < d.n_text_head):
            raise WordTimingError(f"ember: alignment head ({layer}, {h}) is outside the decoder's "
                                  f"{d.n_text_layer} layers x {d.n_text_head} heads")
    return tuple(heads)


@dataclass
class WordTiming:
    word: str
    tokens: list
    start: float
    end: float
    probability: float


# ---------------------------------------------------------------------------------------------
# The numeric steps: median filter, dynamic time warping
# ---------------------------------------------------------------------------------------------

def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median of each `width` window along the last axis, reflect-padded (openai's median_filter)."""
    pad = width // 2
    if width <= 0 or width % 2 == 0:
        raise WordTimingError(f"ember: the median filter width must be an odd positive number, got {width}")
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)  # (..., n, width)
    return np.partition(windows, pad, axis=-1)[..., pad]


def dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through cost matrix x (N, M) -> (row indices, column indices) along it,
    openai's dtw_cpu (ties go to the left step) computed an anti-diagonal at a time: cell (i, j) needs only
    the two previous anti-diagonals."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, np.float32)
    trace = np.full((n + 1, m + 1), -1, np.int8)
    cost[0, 0] = 0
    x = np.asarray(x, np.float32)
    for d in range(2, n + m + 1):  # i + j = d, 1 <= i <= n, 1 <= j <= m
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        t = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2)).astype(np.int8)
        cost[i, j] = x[i - 1, j - 1] + np.choose(t, (c0, c1, c2))
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    path = np.array(path[::-1]).reshape(-1, 2)
    return path[:, 0], path[:, 1]


# ---------------------------------------------------------------------------------------------
# Cross-attention of the alignment heads
# ---------------------------------------------------------------------------------------------

def cross_attention_logits(model, tokens, audio_features, heads) -> tuple[np.ndarray, np.ndarray]:
    """Teacher-forced decoder pass over tokens (list of ids) -> (q k^T / sqrt(hd) of each alignment head,
    float32 (len(heads), T, audio positions); logits (T, vocab) float32)."""
    dec = model.decoder
    t = len(tokens)
    if t > dec.n_ctx:
        raise WordTimingError(f"ember: word timestamps: {t} tokens exceed the decoder's {dec.n_ctx} positions")
    want = {}
    for layer, h in heads:
        want.setdefault(layer, []).append(h)
    cross = dec.cross_kv(audio_features)  # per layer (k, v), each (1, n_head, S, hd)
    idx = ember.tensor(np.asarray([tokens], np.int64))
    x = dec.embed_tokens(idx) + dec.embed_positions.weight[:t]  # (1, T, d)
    mask = attention_mask(np.arange(t), np.arange(t), dtype=x.dtype, device=x.device)
    qks = {}
    for i, layer in enumerate(dec.layers):
        x = x + layer.self_attn(layer.self_attn_layer_norm(x), None, mask)
        h = layer.encoder_attn_layer_norm(x)  # (1, T, d)
        if i in want:
            att = layer.encoder_attn
            q = getattr(att, att.names[0])(h).reshape(1, t, att.n_heads, att.hd).transpose(1, 2)  # (1, H, T, hd)
            k = cross[i][0]  # (1, H, S, hd)
            qk = (q @ k.transpose(2, 3)) * (att.hd ** -0.5)  # (1, H, T, S)
            qk = qk.float().numpy()[0]
            for head in want[i]:
                qks[(i, head)] = qk[head]
        x = x + layer.encoder_attn(h, kv=cross[i])
        x = x + layer.mlp(layer.final_layer_norm(x))
    logits = dec.logits(dec.layer_norm(x)).float().numpy()[0]  # (T, vocab)
    return np.stack([qks[hp] for hp in heads]), logits


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def find_alignment(model, tokenizer, text_tokens, audio_features, num_frames: int, language: str | None = None,
                   *, heads=None, medfilt_width: int = 7, qk_scale: float = 1.0) -> list[WordTiming]:
    """openai's find_alignment: text tokens of one window (no timestamps) against its audio features (1, S, d),
    num_frames mel frames of which hold audio -> [WordTiming] in seconds from the window's start."""
    if len(text_tokens) == 0:
        return []
    heads = alignment_heads(tokenizer.config) if heads is None else heads
    sot_seq = tokenizer.sot_sequence(language, "transcribe", timestamps=True)  # no <|notimestamps|> yet
    tokens = [*sot_seq, tokenizer.no_timestamps, *text_tokens, tokenizer.eot]
    qk, logits = cross_attention_logits(model, tokens, audio_features, heads)
    sampled = logits[len(sot_seq):, :tokenizer.eot]
    probs = _softmax(sampled.astype(np.float32))
    text_token_probs = probs[np.arange(len(text_tokens)), text_tokens]
    weights = qk[:, :, :num_frames // 2]  # heads x tokens x frames
    weights = _softmax(weights * np.float32(qk_scale))
    std, mean = weights.std(axis=-2, keepdims=True), weights.mean(axis=-2, keepdims=True)
    weights = median_filter((weights - mean) / std, medfilt_width)
    matrix = weights.mean(axis=0)[len(sot_seq):-1]
    text_indices, time_indices = dtw(-matrix)
    words, word_tokens = split_to_word_tokens(tokenizer, list(text_tokens) + [tokenizer.eot], language)
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts, ends = jump_times[boundaries[:-1]], jump_times[boundaries[1:]]
    return [WordTiming(w, t, float(s), float(e), float(np.mean(text_token_probs[i:j])))
            for w, t, s, e, i, j in zip(words, word_tokens, starts, ends, boundaries[:-1], boundaries[1:])]


# ---------------------------------------------------------------------------------------------
# Tokens -> words
# ---------------------------------------------------------------------------------------------

def _split_on_unicode(tokenizer, tokens):
    """Cut wherever the text decoded so far is whole UTF-8 (no U+FFFD that the full text lacks)."""
    def text(ids):  # special tokens render as nothing: they are their own "word" either way
        return tokenizer.decode([i for i in ids if i < tokenizer.eot])
    full = text(tokens)
    words, word_tokens, current, offset = [], [], [], 0
    for tok in tokens:
        current.append(tok)
        decoded = text(current)
        if "\ufffd" not in decoded or full[offset + decoded.index("\ufffd")] == "\ufffd":
            words.append(decoded)
            word_tokens.append(current)
            current = []
            offset += len(decoded)
    return words, word_tokens


def split_to_word_tokens(tokenizer, tokens, language: str | None = None):
    """-> (words, token lists): on spaces and punctuation, or per character run for space-less scripts."""
    subwords, subword_tokens = _split_on_unicode(tokenizer, tokens)
    if language in SPACELESS_LANGUAGES:
        return subwords, subword_tokens
    words, word_tokens = [], []
    for sub, toks in zip(subwords, subword_tokens):
        if toks[0] >= tokenizer.eot or sub.startswith(" ") or sub.strip() in string.punctuation or not words:
            words.append(sub)
            word_tokens.append(list(toks))
        else:
            words[-1] += sub
            word_tokens[-1].extend(toks)
    return words, word_tokens


def merge_punctuations(alignment: list[WordTiming], prepended: str, appended: str) -> None:
    """Opening marks join the next word, closing marks the previous one (their words become empty)."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        prev, nxt = alignment[i], alignment[j]
        if prev.word.startswith(" ") and prev.word.strip() in prepended:
            nxt.word, nxt.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        prev, nxt = alignment[i], alignment[j]
        if not prev.word.endswith(" ") and nxt.word in appended:
            prev.word, prev.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            nxt.word, nxt.tokens = "", []
        else:
            i = j
        j += 1


def add_word_timestamps(segments: list[dict], model, tokenizer, audio_features, num_frames: int,
                        time_offset: float, language: str | None = None, last_speech_timestamp: float = 0.0,
                        prepend: str = PREPEND_PUNCTUATIONS, append: str = APPEND_PUNCTUATIONS) -> float:
    """openai's add_word_timestamps for one window's segments (dicts with tokens, start, end): sets each one's
    "words" [{word, start, end, probability}] in seconds of the input, and adjusts the segment's start/end to
    its words; returns the last speech timestamp for the next window."""
    per_segment = [[t for t in s["tokens"] if t < tokenizer.eot] for s in segments]
    text_tokens = [t for seg in per_segment for t in seg]
    alignment = find_alignment(model, tokenizer, text_tokens, audio_features, num_frames, language)
    durations = np.array([t.end - t.start for t in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    longest = median * 2
    if len(durations):  # words at sentence boundaries are at most twice the median word
        for i in range(1, len(alignment)):
            if alignment[i].end - alignment[i].start > longest:
                if alignment[i].word in SENTENCE_END_MARKS:
                    alignment[i].end = alignment[i].start + longest
                elif alignment[i - 1].word in SENTENCE_END_MARKS:
                    alignment[i].start = alignment[i].end - longest
    merge_punctuations(alignment, prepend, append)
    k = 0
    for seg, toks in zip(segments, per_segment):
        saved, words = 0, []
        while k < len(alignment) and saved < len(toks):
            w = alignment[k]
            if w.word:
                words.append({"word": w.word, "start": round(time_offset + w.start, 2),
                              "end": round(time_offset + w.end, 2), "probability": w.probability})
            saved += len(w.tokens)
            k += 1
        if words:
            first, last = words[0], words[-1]
            # the first (and second) word after a pause is at most twice the median word
            if first["end"] - last_speech_timestamp > median * 4 and (
                    first["end"] - first["start"] > longest
                    or (len(words) > 1 and words[1]["end"] - first["start"] > longest * 2)):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > longest:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - longest)
                    first["end"] = words[1]["start"] = boundary
                first["start"] = max(0, first["end"] - longest)
            # prefer the segment's timestamps when the first / last word runs too long
            if seg["start"] < first["end"] and seg["start"] - 0.5 > first["start"]:
                first["start"] = max(0, min(first["end"] - median, seg["start"]))
            else:
                seg["start"] = first["start"]
            if seg["end"] > last["start"] and seg["end"] + 0.5 < last["end"]:
                last["end"] = max(last["start"] + median, seg["end"])
            else:
                seg["end"] = last["end"]
            last_speech_timestamp = seg["end"]
        seg["words"] = words
    return last_speech_timestamp
