"""Tokenizers: tokenizer.json (Whisper, Llama, BERT) natively via `tokenizers` or in pure
Python (Pyodide), plus llama2.c's tokenizer.bin and Whisper's vocabulary.txt."""
from .errors import TokenizerError
from .tokenizer import DecodeStream, Tokenizer

__all__ = ["DecodeStream", "Tokenizer", "TokenizerError"]
