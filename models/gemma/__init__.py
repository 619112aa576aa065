"""Gemma (1) from Hugging Face checkpoints."""
