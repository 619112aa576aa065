"""One tokenizer interface for the three checkpoint kinds: tokenizer.json (ember.tokenizers), llama2.c's
tokenizer.bin, and a GGUF file's embedded vocabulary (gguf.py turns it into one of the other two)."""
from __future__ import annotations


class LlamaTokenizer:
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
