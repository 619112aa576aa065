"""Embed a text corpus (one document per line) on a Ray cluster and write the vectors to Parquet.

    python examples/embed_corpus.py out/                         # CPython's pydoc topics, bundled demo Llama
    python examples/embed_corpus.py out/ --corpus docs.txt --family llama --model owner/name
    python examples/embed_corpus.py out/ --address auto --device cuda --num-gpus 1 --actors 8

ray.data.read_text reads the corpus in parallel (one row per line); each Embedder actor loads the model
once from the copy the driver put in Ray's object store. Columns written: text, embedding (float32
(dim,)), error. Without --corpus, the topics of CPython's help() (pydoc_data.topics), one paragraph a row.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ray_cluster import actor_resources, add_cluster_args, on_cluster


def pydoc_paragraphs(limit: int | None = None) -> list[str]:
    """Paragraphs of CPython's help() topics: a corpus every Python has."""
    from pydoc_data.topics import topics
    paras = [" ".join(p.split()) for text in topics.values() for p in text.split("\n\n")]
    paras = [p for p in paras if len(p) > 40]
    return paras[:limit] if limit else paras


def embed_corpus(out, corpus=None, model=None, family=None, actors: int = 2, batch_size: int = 64,
                 device: str = "cpu", num_gpus: float = 0, limit: int | None = None) -> None:
    """Embed `corpus` (a text file, one document per line; None: pydoc paragraphs) into Parquet under `out`."""
    import ray

    from ember.ray import Embedder
    if not ray.is_initialized():
        ray.init()
    if corpus is None:
        ds = ray.data.from_items([{"text": t} for t in pydoc_paragraphs(limit)])
    else:
        ds = ray.data.read_text(str(Path(corpus).resolve()), ray_remote_args={"num_cpus": 0}, drop_empty_lines=True)
        ds = ds.limit(limit) if limit else ds
    weights = Embedder.share(model)
    ds = ds.map_batches(Embedder, fn_constructor_kwargs={"model": weights, "family": family, "device": device},
                        batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=actors),
                        **actor_resources(num_gpus))
    ds.write_parquet(str(out), ray_remote_args={"num_cpus": 0})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="output folder for the Parquet files")
    p.add_argument("--corpus", default=None, help="a text file, one document per line (default: pydoc topics)")
    p.add_argument("--limit", type=int, default=None, help="embed only the first N documents")
    p.add_argument("--model", default=None, help="model source (default: the family's bundled model)")
    p.add_argument("--family", default=None, help="embedder family (ember.ray.EMBEDDERS; default from config.json)")
    add_cluster_args(p, batch_size=64)
    a = p.parse_args(argv)
    on_cluster(a, lambda: embed_corpus(a.out, a.corpus, a.model, a.family, a.actors, a.batch_size, a.device,
                                       a.num_gpus, a.limit))
    print(f"embeddings written to {a.out}")


if __name__ == "__main__":
    main()
