"""Llama's generation is the zoo's shared one (ember.models.common.generate); this name stays importable."""
from ember.models.common.generate import (  # noqa: F401
    Generation, GenerationStats, Sampler, SamplingParams, TextStream, apply_repetition_penalty, generate,
    generate_batch, stream, top_k_filter, top_p_filter)
