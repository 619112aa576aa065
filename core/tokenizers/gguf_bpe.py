"""The byte-level BPE ("gpt2") vocabulary a GGUF file carries in `tokenizer.ggml.*`, tokenized exactly as llama.cpp
does (src/llama-vocab.cpp: llm_tokenizer_bpe, llm_tokenizer_bpe_session, tokenizer_st_partition, token_to_piece;
src/unicode.cpp: unicode_regex_split):

1. partition: user-defined tokens (type 4), and with special=True control/unknown ones too, are cut out of the
   text first, longest first, each occurrence becoming that token (gguf_spm.partition);
2. each remaining piece is split by the pre-tokenizer that `tokenizer.ggml.pre` names: a list of regexes, each
   applied in turn to every fragment the previous ones left (matches and the text between them become fragments);
3. each fragment, spelled in GPT-2's byte characters, is merged pair by pair, lowest merge rank first (ties: the
   leftmost); with `ignore_merges` (Llama 3) a fragment that is itself a vocabulary entry is that token;
4. a final symbol that is not an entry becomes the tokens of its single bytes.

An unknown `tokenizer.ggml.pre` is an error naming it (llama.cpp refuses it too); a file without one gets
llama.cpp's "default" pre-tokenizer.

    tok = BpeTokenizer.from_gguf_metadata(ember.io.gguf.metadata("SmolLM2-135M-Instruct.Q4_1.gguf"), "smollm2")
    tok.encode("<|im_start|>user", special=True)   # [1, 4093]
"""
from __future__ import annotations

import codecs
import functools
import heapq

from .byte_level import CHAR_BYTES, to_byte_chars
from .errors import TokenizerError
from .gguf_spm import CONTROL, MAX_TOKENS, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, partition
from .unicode_regex import compile_onig

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# pre-tokenizer kind -> its regexes, in order
KINDS = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    "llama3": [_LLAMA3],
    "qwen2": [_QWEN2],
    "gpt2": [_GPT2],
    "starcoder": [r"\p{N}", _GPT2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"],
    "chatglm4": [_LLAMA3],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
                       r"\p{N}"],
}
# tokenizer.ggml.pre -> kind, as llama.cpp's llama_vocab::impl::load maps the names
PRE_TOKENIZERS = {
    "default": "default",
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "dbrx", "smaug-bpe"), "llama3"),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"), "qwen2"),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                     "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais",
                     "trillion", "exaone4", "granite-docling"), "gpt2"),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
                    "starcoder"),
    "falcon": "falcon",
    **dict.fromkeys(("glm4", "chatglm-bpe"), "chatglm4"),
    "deepseek-coder": "deepseek-coder",
}
# the names llama.cpp gives Llama 3's behaviour: a fragment that is a vocabulary entry is that token, and BOS is
# added unless the file says otherwise
LLAMA3_NAMES = frozenset(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"))
# llama.cpp's end-of-generation tokens, found by their text (llama-vocab.cpp, special_eog_ids)
EOG_TEXTS = frozenset(("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
                       "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"))
CACHE_WORDS = 100_000  # distinct fragments remembered before the cache starts over
CACHE_MAX_CHARS = 256


@functools.cache
def pre_tokenizer(kind: str):
    """The compiled regexes of a pre-tokenizer kind."""
    return [compile_onig(r) for r in KINDS[kind]]


def split_fragments(text: str, regexes) -> list[str]:
    """unicode_regex_split: each regex splits every fragment the previous ones left; a match and the text
    between two matches (or before the first, after the last) are fragments, empty matches are none."""
    frags = [text] if text else []
    for rx in regexes:
        out = []
        for f in frags:
            pos = 0
            for m in rx.finditer(f):
                s, e = m.span()
                if s == e:
                    continue
                if s > pos:
                    out.append(f[pos:s])
                out.append(f[s:e])
                pos = e
            if pos < len(f):
                out.append(f[pos:])
        frags = out
    return frags


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class BpeTokenizer:
    def __init__(self, tokens: list[str], types: list[int], merges: list[str], pre: str | None = None,
                 bos_id: int | None = None, eos_id: int | None = None, add_bos: bool = False,
                 where: str = "vocabulary"):
        n = len(tokens)
        if not 0 < n <= MAX_TOKENS:
            raise TokenizerError(f"{where}: tokenizer.ggml.tokens has {n} entries (1..{MAX_TOKENS} allowed)")
        if not isinstance(types, list) or len(types) != n or not all(_is_int(t) for t in types):
            got = f"{len(types)} entries" if isinstance(types, list) else f"a {type(types).__name__}"
            raise TokenizerError(f"{where}: tokenizer.ggml.token_type must be an array of integers, one per token "
                                 f"({n}); got {got}")
        for name, i in (("bos_token_id", bos_id), ("eos_token_id", eos_id)):
            if i is not None and not (_is_int(i) and 0 <= i < n):
                raise TokenizerError(f"{where}: tokenizer.ggml.{name} {i!r:.40} is not a token id in [0, {n})")
        pre = "default" if pre is None else pre
        if pre not in PRE_TOKENIZERS:
            raise TokenizerError(f"{where}: tokenizer.ggml.pre {pre!r} is not a pre-tokenizer ember knows "
                                 f"({', '.join(sorted(PRE_TOKENIZERS))})")
        self.pre, self.kind = pre, PRE_TOKENIZERS[pre]
        self.regexes, self.ignore_merges = pre_tokenizer(self.kind), pre in LLAMA3_NAMES
        self.tokens, self.types = list(tokens), [int(t) for t in types]
        self.bos_id, self.add_bos = bos_id, add_bos
        self.lookup = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {}
        for rank, m in enumerate(merges):
            cut = m.find(" ", 1)  # llama.cpp splits at the first space after the first character
            if cut < 0:
                raise TokenizerError(f"{where}: tokenizer.ggml.merges[{rank}] {m[:40]!r} is not 'left right'")
            self.ranks.setdefault((m[:cut], m[cut + 1:]), rank)
        eog = {i for i, t in enumerate(self.tokens) if t in EOG_TEXTS}
        self.eos_id = eos_id
        self.eos_ids = sorted(eog | ({eos_id} if eos_id is not None else set()))
        cut = [i for i, ty in enumerate(self.types) if ty in (CONTROL, USER_DEFINED, UNKNOWN)]
        cut.sort(key=lambda i: -len(self.tokens[i].encode("utf-8")))
        self._user = [i for i in cut if self.types[i] == USER_DEFINED]
        self._special = cut
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_gguf_metadata(cls, md: dict, where: str = "gguf") -> "BpeTokenizer":
        kind = md.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise TokenizerError(f"{where}: tokenizer.ggml.model is {kind!r}; this tokenizer reads 'gpt2' (BPE)")
        tokens, merges = md.get("tokenizer.ggml.tokens"), md.get("tokenizer.ggml.merges")
        for name, v in (("tokens", tokens), ("merges", merges)):
            if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
                raise TokenizerError(f"{where}: tokenizer.ggml.{name} must be an array of strings")
        pre = md.get("tokenizer.ggml.pre")
        if pre is not None and not isinstance(pre, str):
            raise TokenizerError(f"{where}: tokenizer.ggml.pre must be a string, got {pre!r}")
        # llama.cpp: a BPE vocabulary adds no BOS unless its pre-tokenizer (Llama 3's) or the file says so
        add_bos = md.get("tokenizer.ggml.add_bos_token", pre in LLAMA3_NAMES)
        types = md.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))
        return cls(tokens, types, merges, pre, md.get("tokenizer.ggml.bos_token_id"),
                   md.get("tokenizer.ggml.eos_token_id"), bool(add_bos), where)

    # ------------------------------------------------------------------ encode

    def encode(self, text: str, bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of text; bos=None follows the file's add_bos_token. special=True also turns control
        tokens written in the text (e.g. '<|im_start|>') into their ids, as llama.cpp's parse_special."""
        out = [self.bos_id] if (self.add_bos if bos is None else bos) and self.bos_id is not None else []
        for piece in partition(text, self.tokens, self._special if special else self._user):
            if isinstance(piece, int):
                out.append(piece)
                continue
            for frag in split_fragments(piece, self.regexes):
                out.extend(self._word(frag))
        return out

    def _word(self, frag: str) -> list[int]:
        hit = self._cache.get(frag)
        if hit is not None:
            return hit
        word = to_byte_chars(frag)
        tid = self.lookup.get(word) if self.ignore_merges else None
        ids = [tid] if tid is not None else self._merge(word)
        if len(frag) <= CACHE_MAX_CHARS:
            if len(self._cache) >= CACHE_WORDS:
                self._cache.clear()
            self._cache[frag] = ids
        return ids

    def _merge(self, word: str) -> list[int]:
        """llm_tokenizer_bpe_session.tokenize for one fragment: rank-ordered merges, then the final symbols."""
        sym = list(word)                                   # symbol texts; "" once merged away
        n = len(sym)
        nxt = list(range(1, n)) + [-1]
        prev = list(range(-1, n - 1))
        heap, ranks = [], self.ranks

        def add(left, right):
            if left < 0 or right < 0:
                return
            r = ranks.get((sym[left], sym[right]))
            if r is not None:
                heapq.heappush(heap, (r, left, sym[left] + sym[right]))

        for i in range(1, n):
            add(i - 1, i)
        while heap:
            _, left, text = heapq.heappop(heap)
            right = nxt[left]
            if not sym[left] or right < 0 or sym[left] + sym[right] != text:
                continue  # outdated: one side merged since the pair was queued
            sym[left], sym[right] = text, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            add(prev[left], left)
            add(left, nxt[left])
        out, lookup = [], self.lookup
        for s in sym:
            if not s:
                continue
            tid = lookup.get(s)
            if tid is not None:
                out.append(tid)
            else:  # llama.cpp looks up each UTF-8 byte of the symbol alone: only ASCII ones can be entries
                out.extend(lookup[chr(b)] for b in s.encode("utf-8") if b < 128 and chr(b) in lookup)
        return out

    # ------------------------------------------------------------------ decode

    @functools.cached_property
    def _pieces(self) -> list[bytes]:
        return [self._piece(i) for i in range(len(self.tokens))]

    def _piece(self, tid: int) -> bytes:
        ty, t = self.types[tid], self.tokens[tid]
        if ty in (CONTROL, UNKNOWN, UNUSED):
            return b""
        if ty == USER_DEFINED:
            return t.encode("utf-8")
        try:  # llama_decode_text: GPT-2 byte characters back to bytes (a foreign character stays as UTF-8)
            return bytes(CHAR_BYTES[c] for c in t)
        except KeyError:
            return b"".join(bytes([CHAR_BYTES[c]]) if c in CHAR_BYTES else c.encode("utf-8") for c in t)

    def piece(self, tid: int) -> bytes:
        """token_to_piece with special=False: control/unknown/unused -> b'', user-defined as written, normal
        tokens' byte characters -> their bytes."""
        if not 0 <= tid < len(self.tokens):
            raise TokenizerError(f"ember: token id {tid} is outside the vocabulary [0, {len(self.tokens)})")
        return self._pieces[tid]

    def token_bytes(self, tid: int) -> bytes | None:
        """The bytes a token adds to the text, or None for a control/unknown/unused token (a constrained
        decoder never picks those inside the text)."""
        return None if self.types[tid] in (CONTROL, UNKNOWN, UNUSED) else self.piece(tid)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return b"".join(self.piece(int(i)) for i in ids).decode("utf-8", errors="replace")

    def decode_stream(self, skip_special_tokens: bool = True) -> "StreamDecoder":
        return StreamDecoder(self)

    def token_to_id(self, text: str) -> int | None:
        return self.lookup.get(text)

    def vocab_size(self) -> int:
        return len(self.tokens)


class StreamDecoder:
    """.step(id) -> the text completed by this token, or None; incomplete UTF-8 is held back."""

    def __init__(self, tok):
        self.tok = tok
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, tid: int) -> str | None:
        return self._utf8.decode(self.tok.piece(int(tid))) or None
