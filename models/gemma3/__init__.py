"""Gemma 3 (text): GGUF and Hugging Face loaders, the GGUF tokenizer, generation through ember.models.llama.generate."""
