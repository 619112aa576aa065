"""Falcon from Hugging Face checkpoints."""
