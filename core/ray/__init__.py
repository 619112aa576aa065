"""ember over a dataset with Ray Data: callable classes for `ray.data.Dataset.map_batches` that load
their model once per actor and map dict-of-numpy batches.

    import ray
    from ember.ray import Transcriber
    ds = ray.data.from_items([{"path": p} for p in wavs])
    ds = ds.map_batches(Transcriber, fn_constructor_kwargs={"device": "cpu"}, batch_size=4,
                        compute=ray.data.ActorPoolStrategy(size=2))
    ds.write_parquet("out/")                     # columns: path, text, segments, error

| class | input column | adds |
|---|---|---|
| Transcriber (Whisper) | `audio` (16 kHz samples), `bytes` (WAV), or `path` | `text`, `segments` |
| Embedder | `text` | `embedding` |
| Detector (YOLOv8) | `image` ((H, W, 3) uint8), `bytes`, or `path` | `detections` |
| Generator (Llama / Gemma 3) | `prompt` | `completion` |

Every class also adds `error`: "" where the row worked, else the exception that row raised (a bad file
fails its own row, never the job). `model=` is what the family's loader takes (folder, URL, hub id,
file; None: the bundled demo) or the ObjectRef `Class.share(model)` returns, so the driver downloads
once and every actor reads the weights from Ray's object store. Each class is an ordinary callable on
one batch dict too; this package imports Ray only for `share` and for an ObjectRef `model=`.
"""
from .batch import BatchMapper
from .detector import Detector
from .embedder import EMBEDDERS, Embedder, register_embedder
from .generator import Generator
from .transcriber import Transcriber
from .weights import ModelFiles

__all__ = ["BatchMapper", "Detector", "EMBEDDERS", "Embedder", "Generator", "ModelFiles", "Transcriber",
           "register_embedder"]
