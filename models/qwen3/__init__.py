"""Qwen3 (the llama layout with per-head q/k RMSNorm)."""
