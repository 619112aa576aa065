"""ViT image classification from Hugging Face checkpoints."""
