"""Qwen2-MoE and Qwen3-MoE (sparse mixtures of experts) on the llama layout."""
