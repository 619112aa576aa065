"""Tokenizers: tokenizer.json (Whisper, Llama, BERT) natively via `tokenizers` or in pure
Python (Pyodide), plus llama2.c's tokenizer.bin and Whisper's vocabulary.txt."""
from .errors import TokenizerError
from .llama2c import Llama2cTokenizer
from .tokenizer import DecodeStream, Tokenizer
from .whisper_vocab import WhisperVocabulary

__all__ = ["DecodeStream", "Llama2cTokenizer", "Tokenizer", "TokenizerError", "WhisperVocabulary"]
