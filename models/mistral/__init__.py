"""Llama-layout causal LMs from Hugging Face checkpoints: Mistral, Qwen2 (and the base gemma/phi3/starcoder2 vary)."""
