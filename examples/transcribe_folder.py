"""Transcribe every WAV file in a folder with Whisper on a Ray cluster and write the text to Parquet.

    python examples/transcribe_folder.py clips/ out/         # local cluster: 2 CPUs, 2 Whisper actors
    python examples/transcribe_folder.py clips/ out/ --address auto --device cuda --num-gpus 1 --actors 8

Each actor loads Whisper once (the driver resolves the model and puts its files in Ray's object store,
so nodes never download it themselves) and transcribes batches of paths; a file that is not a WAV gets
its message in the `error` column and the rest of the job goes on. On a cluster the folder must be
reachable under the same path from every node (shared storage), as the paths are what travels.
Columns written: path, text, segments (start, end, text, tokens, ...), error.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ray_cluster import actor_resources, add_cluster_args, on_cluster


def transcribe_folder(folder, out, model=None, actors: int = 2, batch_size: int = 4, device: str = "cpu",
                      num_gpus: float = 0) -> int:
    """Transcribe folder/*.wav into Parquet files under `out`; -> the number of files. Joins the Ray
    cluster `ray.init` finds (or starts a local one) unless one is already joined."""
    import ray

    from ember.ray import Transcriber
    paths = sorted(str(p) for p in Path(folder).glob("*.wav"))
    if not paths:
        raise SystemExit(f"no .wav files in {folder}")
    if not ray.is_initialized():
        ray.init()
    weights = Transcriber.share(model)                    # resolved (downloaded) once, here
    ds = ray.data.from_items([{"path": p} for p in paths])
    schema = Transcriber.arrow_schema(ds.schema())       # typed even where a batch has no segments at all
    ds = ds.map_batches(Transcriber, fn_constructor_kwargs={"model": weights, "device": device},
                        batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=actors),
                        **actor_resources(num_gpus))
    ds.write_parquet(str(out), schema=schema, ray_remote_args={"num_cpus": 0})  # light: the cores go to the actors
    return len(paths)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder")
    p.add_argument("out", help="output folder for the Parquet files")
    p.add_argument("--model", default=None, help="Whisper folder, URL or hub id (default: the bundled tiny.en)")
    add_cluster_args(p, batch_size=4)
    a = p.parse_args(argv)
    n = on_cluster(a, lambda: transcribe_folder(a.folder, a.out, a.model, a.actors, a.batch_size, a.device,
                                                a.num_gpus))
    print(f"transcribed {n} files into {a.out}")


if __name__ == "__main__":
    main()
