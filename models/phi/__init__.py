"""Phi-3 (fused qkv / gate-up, llama layout) and Phi-2 (partial rotary, parallel attention + MLP)."""
