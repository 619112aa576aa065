"""A language model over a dataset: `prompt` -> `completion` (greedy by default, as `ember generate`).
The model loads as `ember generate` loads it (ember.models.text.load_text_model: a GGUF's architecture,
config.json's model_type): Llama 2/3, Gemma 3 or another causal LM."""
from __future__ import annotations

import os

from .batch import BatchMapper


class Generator(BatchMapper):
    inputs = ("prompt",)
    outputs = {"completion": ""}

    def __init__(self, model=None, device: str = "cpu", max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, repetition_penalty: float = 1.0, seed: int | None = None):
        """model: a causal LM's folder, .gguf, .bin, URL or hub id (None: the bundled demo Llama), or an
        ObjectRef from Generator.share(). A seed makes sampling repeatable row by row: each prompt
        samples from its own generator seeded with it."""
        from ember.models.common.generate import SamplingParams
        self.max_new_tokens = max_new_tokens
        self.params = SamplingParams(temperature, top_k, top_p, repetition_penalty, seed)
        super().__init__(model, device)

    @classmethod
    def local_path(cls, model):
        from ember import hub
        from ember.models.llama.load import DEMO_DIR, single_file
        if model is None:
            return DEMO_DIR
        source = hub.resolve(os.fspath(model))
        name = single_file(source)
        if name is not None:
            return source.path(name)
        if source.remote:  # the files a Hugging Face folder needs, into the hub cache's mirror of it
            for f, required in (("config.json", True), ("model.safetensors", True), ("tokenizer.json", False)):
                source.path(f, required=required)
        return source.local

    def load(self, model):
        from ember.models.text import load_text_model
        self.model, self.tokenizer = load_text_model(os.fspath(self.local_path(model)), device=self.device)
        if self.tokenizer is None:
            raise ValueError(f"ember: {model} carries no tokenizer; Generator needs one")

    def run(self, item, column):
        from ember.models.common.generate import TextStream, generate
        gen = generate(self.model, self.tokenizer.encode(str(item), bos=True), self.max_new_tokens, self.params,
                       self.tokenizer.eos_ids)
        return {"completion": "".join(TextStream(gen, self.tokenizer))}  # the text `ember generate` prints
