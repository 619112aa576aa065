"""TextTokenizer: one interface (encode with or without BOS, decode, a stream decoder, eos_ids) over the
tokenizers a causal LM arrives with: a tokenizer.json (ember.tokenizers), llama2.c's tokenizer.bin, and a GGUF
file's embedded vocabulary (`tokenizer.ggml.*`: tokenizer_from_gguf below — SentencePiece "llama" vocabularies
and byte-level "gpt2" BPE, each tokenized as llama.cpp does)."""
from __future__ import annotations

from ember.errors import FormatError
from ember.tokenizers.byte_level import from_byte_chars


class TextTokenizer:
    chat_template = None  # a ChatTemplate (chat_template.py) when the model carries one

    def __init__(self, impl, bos_id: int | None, eos_ids: list[int], kind: str):
        self.impl, self.bos_id, self.eos_ids, self.kind = impl, bos_id, list(eos_ids), kind

    @classmethod
    def from_json(cls, text: str, bos_id=None, eos_ids=(), backend: str = "auto"):
        """backend: "auto" (the `tokenizers` package when installed), "native" or "python" (Pyodide)."""
        from ember.tokenizers import Tokenizer
        tok = Tokenizer.from_str(text, backend=backend)
        bos = bos_id if bos_id is not None else tok.token_to_id("<s>")
        eos = list(eos_ids) or [i for i in (tok.token_to_id("</s>"),) if i is not None]
        return cls(tok, bos, eos, "json")

    @classmethod
    def from_llama2c(cls, data: bytes, vocab_size: int):
        from ember.tokenizers.llama2c import Llama2cTokenizer
        return cls(Llama2cTokenizer.from_bytes(data, vocab_size), 1, [2], "llama2c")

    def encode(self, text: str, bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of text, with BOS in front when asked (and the tokenizer has one). A tokenizer.json's added
        tokens written in the text are always their ids (special is accepted for the GGUF tokenizers' interface)."""
        if self.kind == "llama2c":
            return self.impl.encode(text, bos=bos, eos=False)
        ids = list(self.impl.encode(text, add_special_tokens=False).ids)
        return ([self.bos_id] if bos and self.bos_id is not None else []) + ids

    def decode(self, ids) -> str:
        return self.impl.decode(list(ids), skip_special_tokens=True)

    def decode_stream(self):
        """A stream decoder: .step(id) -> text piece or None (holds back incomplete UTF-8)."""
        return self.impl.decode_stream(skip_special_tokens=True)

    def vocab_size(self) -> int:
        if self.kind == "llama2c":
            return len(self.impl.pieces)
        return self.impl.get_vocab_size()

    def token_bytes(self, tid: int) -> bytes | None:
        """The bytes a token adds to the text (a constrained decoder's vocabulary), None for special tokens."""
        if self.kind == "llama2c":
            return None if tid in (0, 1, 2) else self.impl.piece_bytes(-1, tid)
        if not self.impl.decode([tid], skip_special_tokens=True):
            return None  # special (or decodes to nothing)
        token = self.impl.id_to_token(tid)
        raw = from_byte_chars(token)
        if raw is not None and self._byte_level():
            return raw
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            return bytes([int(token[3:5], 16)])
        return token.replace("\u2581", " ").encode("utf-8")

    def _byte_level(self) -> bool:
        bl = getattr(self, "_is_byte_level", None)
        if bl is None:  # GPT-2's byte alphabet spells the space 'Ġ': a byte-level vocabulary has it
            bl = self._is_byte_level = self.impl.token_to_id("\u0120") is not None or \
                self.impl.token_to_id("\u0120the") is not None
        return bl


def tokenizer_from_gguf(md: dict, where: str, spm: str = "llama.cpp"):
    """The tokenizer of a GGUF file (see _gguf_tokenizer) with its chat template (`tokenizer.chat_template`) as
    `.chat_template`, or None."""
    from .chat_template import from_gguf
    tok = _gguf_tokenizer(md, where, spm)
    if tok is not None:
        tok.chat_template = from_gguf(md, where)
    return tok


def _gguf_tokenizer(md: dict, where: str, spm: str):
    """The tokenizer a GGUF file's `tokenizer.ggml.*` metadata describes, or None when it has none. SentencePiece
    ("llama") vocabularies: spm="llama.cpp" tokenizes as llama.cpp does (ember.tokenizers.gguf_spm), "llama2c"
    as llama2.c's tokenizer (the pieces and scores read as a tokenizer.bin). Byte-level BPE ("gpt2"): as
    llama.cpp does, with the pre-tokenizer `tokenizer.ggml.pre` names (ember.tokenizers.gguf_bpe)."""
    kind, tokens = md.get("tokenizer.ggml.model"), md.get("tokenizer.ggml.tokens")
    if kind is None or tokens is None:
        return None
    bos, eos = md.get("tokenizer.ggml.bos_token_id"), md.get("tokenizer.ggml.eos_token_id")
    if kind == "llama" and spm == "llama.cpp":
        from ember.tokenizers.gguf_spm import SpmTokenizer
        return SpmTokenizer.from_gguf_metadata(md, where)
    if kind == "llama":
        from ember.tokenizers.llama2c import Llama2cTokenizer
        pieces = [t.replace("\u2581", " ").encode("utf-8") for t in tokens]
        scores = [float(s) for s in md.get("tokenizer.ggml.scores", [0.0] * len(tokens))]
        impl = Llama2cTokenizer(pieces, scores, max(len(p) for p in pieces))
        return TextTokenizer(impl, 1 if bos is None else bos, [2 if eos is None else eos], "llama2c")
    if kind == "gpt2":
        from ember.tokenizers.gguf_bpe import BpeTokenizer
        return BpeTokenizer.from_gguf_metadata(md, where)
    raise FormatError(f"ember: {where}: GGUF tokenizer model {kind!r} is not supported (llama, gpt2)")
