"""TextTokenizer: one interface (encode with or without BOS, decode, a stream decoder, eos_ids) over the
tokenizers a causal LM arrives with: a tokenizer.json (ember.tokenizers), llama2.c's tokenizer.bin, and a GGUF
file's embedded vocabulary (`tokenizer.ggml.*`: tokenizer_from_gguf below — SentencePiece "llama" vocabularies,
byte-level "gpt2" BPE through a tokenizer.json built from it)."""
from __future__ import annotations

import json

from ember.errors import FormatError


class TextTokenizer:
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

    def encode(self, text: str, bos: bool = True) -> list[int]:
        """Token ids of text, with BOS in front when asked (and the tokenizer has one)."""
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
        return self.impl.get_vocab_size()


def tokenizer_from_gguf(md: dict, where: str, spm: str = "llama.cpp"):
    """The tokenizer a GGUF file's `tokenizer.ggml.*` metadata describes, or None when it has none. SentencePiece
    ("llama") vocabularies: spm="llama.cpp" tokenizes as llama.cpp does (ember.tokenizers.gguf_spm), "llama2c"
    as llama2.c's tokenizer (the pieces and scores read as a tokenizer.bin). Byte-level BPE ("gpt2"): a
    tokenizer.json built from the vocabulary and merges."""
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
        types = md.get("tokenizer.ggml.token_type", [1] * len(tokens))
        special = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": False, "special": True} for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
        bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        merges = [m.split(" ", 1) for m in md.get("tokenizer.ggml.merges", [])]
        j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special, "normalizer": None,
             "pre_tokenizer": bl, "post_processor": None, "decoder": bl,
             "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                       "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}
        return TextTokenizer.from_json(json.dumps(j), bos, [] if eos is None else [eos])
    raise FormatError(f"ember: {where}: GGUF tokenizer model {kind!r} is not supported (llama, gpt2)")
