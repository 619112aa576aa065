"""The cluster options the Ray examples share (transcribe_folder.py, embed_corpus.py): where the cluster is,
how many model actors, and the device each uses."""
from __future__ import annotations


def add_cluster_args(p, batch_size: int):
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local cluster)")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local cluster")
    p.add_argument("--actors", type=int, default=2, help="model actors (each loads the model once)")
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--device", default="cpu", help="cpu | cuda | webgpu")
    p.add_argument("--num-gpus", type=float, default=0, help="GPUs per actor (1 with --device cuda)")


def actor_resources(num_gpus: float) -> dict:
    """map_batches resources of one actor: a CPU each, or a GPU each (then the CPUs are the I/O's)."""
    return {"num_cpus": 0 if num_gpus else 1, "num_gpus": num_gpus}


def on_cluster(args, job):
    """Join args.address (or start a local cluster of args.num_cpus), run job(), shut down."""
    import ray
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.num_cpus)
    try:
        return job()
    finally:
        ray.shutdown()
