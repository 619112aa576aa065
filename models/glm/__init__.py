"""GLM and GLM-4 (llama layout, fused gate/up, interleaved partial rotary; GLM-4: sandwich norms)."""
