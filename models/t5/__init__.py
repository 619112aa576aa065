"""T5 / T5 v1.1 / Flan-T5 encoder-decoder."""
