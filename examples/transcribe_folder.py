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
                        batch_size=batch_size, concurrency=actors, num_cpus=0 if num_gpus else 1, num_gpus=num_gpus)
    ds.write_parquet(str(out), schema=schema, ray_remote_args={"num_cpus": 0})  # light: the cores go to the actors
    return len(paths)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder")
    p.add_argument("out", help="output folder for the Parquet files")
    p.add_argument("--model", default=None, help="Whisper folder, URL or hub id (default: the bundled tiny.en)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local cluster)")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local cluster")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--device", default="cpu", help="cpu | cuda | webgpu")
    p.add_argument("--num-gpus", type=float, default=0, help="GPUs per actor (1 with --device cuda)")
    a = p.parse_args(argv)
    import ray
    ray.init(address=a.address) if a.address else ray.init(num_cpus=a.num_cpus)
    try:
        n = transcribe_folder(a.folder, a.out, a.model, a.actors, a.batch_size, a.device, a.num_gpus)
    finally:
        ray.shutdown()
    print(f"transcribed {n} files into {a.out}")


if __name__ == "__main__":
    main()
