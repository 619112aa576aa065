"""LoRA training, ember vs torch + peft, as ratios measured in one run: steps/s and the peak memory a training step
adds, on the same float32 base (SmolLM2-135M-Instruct dequantized by transformers from the GGUF; or a random Llama
of its shape with --random), the same adapters (rank 8, alpha 16, q/k/v/o/gate/up/down), the same tokens (batch 1),
AdamW on the adapters. Engines alternate round by round; each figure is the best of the rounds. ember's quantized
base (the GGUF's Q4_1/Q8_0 blocks kept, float32 activations: what `ember finetune` trains) and ember with gradient
checkpointing are extra columns.

Peak memory: each engine again in its own process, with glibc's mmap threshold fixed (MALLOC_MMAP_THRESHOLD_, so
freed arrays go back to the system at once instead of staying in the heap): the resident high-water mark (VmHWM,
reset through /proc/self/clear_refs) over its second step, less the resident size just before that step: what a
step's activations, gradients and optimizer work add over the weights loaded.

Measured (this 2-core machine, load 4-7 from other jobs; SmolLM2-135M-Instruct, rank 8): at 128 tokens ember
0.36x torch+peft's steps/s (0.084 vs 0.231), with checkpointing 0.17x, on the Q4_1 base 0.22x; a step's peak
over the weights 773 MiB (3.15x torch's 246), with checkpointing 168 MiB (0.68x). At 512 tokens: 4603 MiB
(4.74x torch's 972), with checkpointing 802 MiB (0.82x).

    python bench/bench_lora.py [--seq 128] [--rank 8] [--steps 2] [--rounds 3] [--random] [--no-quantized]
                               [--checkpoint]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def step_peak_mib(step) -> float:
    """MiB the resident set grows to during one call of `step`, over its size before."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    before = _status_kib("VmRSS")
    step()
    return (_status_kib("VmHWM") - before) / 1024


def timed(step, steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - t)


def bases(random_weights: bool):
    """(transformers float32 LlamaForCausalLM, the GGUF path or None)."""
    import torch
    import transformers
    sys.path.insert(0, str(ROOT / "tests"))
    from smollm2_assets import smollm2_gguf
    path = smollm2_gguf()
    if not random_weights:
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                               dtype=torch.float32)
        return hf.eval(), path
    hc = transformers.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                  num_attention_heads=9, num_key_value_heads=3, rope_theta=1e5,
                                  max_position_embeddings=8192, tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(hc).eval(), None


def ember_step_fn(model, ids, rank, lr, seed=0, checkpoint=False):
    import ember
    from ember.nn import functional as F
    from ember.train import lora
    lora.add_adapters(model, lora.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS), seed=seed)
    if checkpoint:
        model.gradient_checkpointing = True
    opt = ember.optim.AdamW(lora.lora_parameters(model), lr=lr)
    x, y = ember.tensor(ids[:, :-1]), ember.tensor(ids[:, 1:])
    model.train()

    def step():
        out = model(x)
        logits = getattr(out, "logits", out)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def torch_step_fn(hf, ids, rank, lr):
    import peft
    import torch
    pm = peft.get_peft_model(hf, peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS,
                                                 lora_dropout=0.0, task_type="CAUSAL_LM"))
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=lr)
    x, y = torch.tensor(ids[:, :-1]), torch.tensor(ids[:, 1:])
    pm.train()

    def step():
        logits = pm(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def build(name, hf, path, ids, rank):
    """The step function of engine `name`."""
    import ember
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.names import from_hf_state_dict
    from ember.models.text import load_text_model
    if name == "torch+peft f32":
        return torch_step_fn(hf, ids, rank, 1e-4)
    if name == "ember Q4_1 base":
        return ember_step_fn(load_text_model(str(path), activations="float32")[0], ids, rank, 1e-4)
    model = from_hf_state_dict({k: ember.tensor(v.detach().numpy().copy()) for k, v in hf.state_dict().items()},
                               LlamaConfig.from_hf(hf.config.to_dict()))
    return ember_step_fn(model, ids, rank, 1e-4, checkpoint=name.endswith("ckpt"))


def memory_child(a):
    """One engine, two steps: the second's peak over the resident size before it, as JSON on stdout's last line."""
    import gc
    hf, path = bases(a.random)
    ids = np.random.default_rng(0).integers(0, hf.config.vocab_size, (1, a.seq + 1))
    step = build(a.memory, hf, path, ids, a.rank)
    if a.memory != "torch+peft f32":
        del hf
    gc.collect()
    step()
    gc.collect()
    peak = step_peak_mib(step)
    print(json.dumps({"peak_mib": peak, "resident_mib": _status_kib("VmRSS") / 1024}))


def memory(name, a) -> dict:
    cmd = [sys.executable, __file__, "--memory", name, "--seq", str(a.seq), "--rank", str(a.rank)]
    if a.random:
        cmd.append("--random")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2, help="timed steps a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--random", action="store_true", help="a random Llama of SmolLM2's shape, not its weights")
    ap.add_argument("--no-quantized", action="store_true", help="skip ember on the GGUF's quantized base")
    ap.add_argument("--checkpoint", action="store_true", help="add ember with gradient checkpointing")
    ap.add_argument("--no-speed", action="store_true", help="peak memory only")
    ap.add_argument("--memory", default=None, help=argparse.SUPPRESS)  # the child that measures one engine
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    if a.memory:
        return memory_child(a)
    hf, path = bases(a.random)
    names = ["ember f32"] + ["ember f32 ckpt"] * a.checkpoint + \
        ["ember Q4_1 base"] * (path is not None and not a.no_quantized) + ["torch+peft f32"]
    ref = "torch+peft f32"
    rate, first = {k: 0.0 for k in names}, {}
    if not a.no_speed:
        ids = np.random.default_rng(0).integers(0, hf.config.vocab_size, (1, a.seq + 1))
        engines = {k: build(k, hf, path, ids, a.rank) for k in names}
        first = {k: s() for k, s in engines.items()}  # warm-up; the losses agree on the float32 bases
        for _ in range(a.rounds):
            for k, s in engines.items():
                rate[k] = max(rate[k], timed(s, a.steps))
        del engines
    del hf
    mem = {k: memory(k, a) for k in names}
    print(f"LoRA training, {'random Llama' if a.random else 'SmolLM2-135M-Instruct'} (30 blocks, width 576), "
          f"batch 1 x {a.seq} tokens, rank {a.rank}, {len(TARGETS)} projections; {os.cpu_count()} CPU threads; "
          f"best of {a.rounds} interleaved rounds x {a.steps} steps")
    for k in names:
        speed = "" if a.no_speed else f"{rate[k]:6.3f} steps/s ({rate[k] / rate[ref]:5.2f}x torch)   "
        loss = f"   first loss {first[k]:.5f}" if first else ""
        m = mem[k]["peak_mib"]
        print(f"  {k:17s} {speed}step peak {m:7.1f} MiB ({m / mem[ref]['peak_mib']:5.2f}x torch) over "
              f"{mem[k]['resident_mib']:6.0f} MiB resident{loss}")


if __name__ == "__main__":
    main()
