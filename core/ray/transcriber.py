"""Whisper over a dataset: `audio` (16 kHz mono float samples), `bytes` (a WAV file's bytes, as
ray.data.read_binary_files gives) or `path` (a WAV file) -> `text`, `segments` (ember.models.whisper's
transcribe(), one dict per segment)."""
from __future__ import annotations

import numpy as np

from .batch import BatchMapper


class Transcriber(BatchMapper):
    inputs = ("audio", "bytes", "path")
    outputs = {"text": "", "segments": list}

    def __init__(self, model=None, device: str = "cpu", **options):
        """model: a Whisper folder, URL, hub id or CTranslate2 folder (None: the bundled tiny.en), or an
        ObjectRef from Transcriber.share(). options: ember.models.whisper transcribe() options
        (language, timestamps, beam_size, temperature, ...)."""
        self.options = options
        super().__init__(model, device)

    @classmethod
    def local_path(cls, model):
        from ember.models.whisper.load import resolve
        return resolve(model)

    @classmethod
    def arrow_types(cls):
        import pyarrow as pa
        f64, i64 = pa.float64(), pa.int64()
        segment = pa.struct([("id", i64), ("seek", i64), ("start", f64), ("end", f64), ("text", pa.string()),
                             ("tokens", pa.list_(i64)), ("avg_logprob", f64), ("compression_ratio", f64),
                             ("no_speech_prob", f64), ("temperature", f64)])   # transcribe()'s segment dict
        return {"segments": pa.list_(segment)}

    def load(self, model):
        from ember.models.whisper.load import load_whisper
        self.model, self.config, self.tokenizer = load_whisper(model, device=self.device)

    def run(self, item, column):
        from ember.models.whisper.transcribe import transcribe
        if column == "path":
            item = str(item)
        elif column == "audio":
            item = np.asarray(item, np.float32)
        result = transcribe(self.model, self.tokenizer, item, **self.options)
        return {"text": result["text"], "segments": result["segments"]}
