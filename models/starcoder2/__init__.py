"""StarCoder2 from Hugging Face checkpoints."""
