"""LoRA training, ember vs torch + peft, as ratios measured in one run: steps/s and the peak memory a training step
adds, on the same float32 base (SmolLM2-135M-Instruct dequantized by transformers from the GGUF; or a random Llama
of its shape with --random), the same adapters (rank 8, alpha 16, q/k/v/o/gate/up/down), the same tokens (batch 1),
AdamW on the adapters. Engines alternate round by round; each figure is the best of the rounds. ember's quantized
base (the GGUF's Q4_1/Q8_0 blocks kept, float32 activations: what `ember finetune` trains) and ember with gradient
checkpointing are extra columns.

Peak memory: the process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs) over one step,
less its resident size just before the step: what the step's activations, gradients and optimizer work add over
the weights already loaded.

    python bench/bench_lora.py [--seq 128] [--rank 8] [--steps 2] [--rounds 3] [--random] [--no-quantized]
"""
from __future__ import annotations

import argparse
import os
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2, help="timed steps a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--random", action="store_true", help="a random Llama of SmolLM2's shape, not its weights")
    ap.add_argument("--no-quantized", action="store_true", help="skip ember on the GGUF's quantized base")
    ap.add_argument("--checkpoint", action="store_true", help="add ember with gradient checkpointing")
    a = ap.parse_args(argv)
    import torch

    import ember
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.names import from_hf_state_dict
    from ember.models.text import load_text_model
    torch.set_num_threads(os.cpu_count() or 1)
    hf, path = bases(a.random)
    ids = np.random.default_rng(0).integers(0, hf.config.vocab_size, (1, a.seq + 1))
    engines = {}

    def ember_f32():
        return from_hf_state_dict({k: ember.tensor(v.detach().numpy().copy()) for k, v in hf.state_dict().items()},
                                  LlamaConfig.from_hf(hf.config.to_dict()))
    engines["ember f32"] = ember_step_fn(ember_f32(), ids, a.rank, 1e-4)
    if a.checkpoint:
        engines["ember f32 ckpt"] = ember_step_fn(ember_f32(), ids, a.rank, 1e-4, checkpoint=True)
    if path is not None and not a.no_quantized:
        qmodel, _ = load_text_model(str(path), activations="float32")
        engines["ember Q4_1 base"] = ember_step_fn(qmodel, ids, a.rank, 1e-4)
    engines["torch+peft f32"] = torch_step_fn(hf, ids, a.rank, 1e-4)
    rate = {k: 0.0 for k in engines}
    mem = {k: float("inf") for k in engines}
    first = {k: s() for k, s in engines.items()}  # warm-up; the losses agree on the float32 bases
    for _ in range(a.rounds):
        for k, s in engines.items():
            mem[k] = min(mem[k], step_peak_mib(s))
            rate[k] = max(rate[k], timed(s, a.steps))
    ref = "torch+peft f32"
    print(f"LoRA training, {'random Llama' if a.random else 'SmolLM2-135M-Instruct'} (30 blocks, width 576), "
          f"batch 1 x {a.seq} tokens, rank {a.rank}, {len(TARGETS)} projections; {os.cpu_count()} CPU threads; "
          f"best of {a.rounds} interleaved rounds x {a.steps} steps")
    for k in engines:
        print(f"  {k:17s} {rate[k]:6.3f} steps/s ({rate[k] / rate[ref]:5.2f}x torch)   step peak "
              f"{mem[k]:7.1f} MiB ({mem[k] / mem[ref]:5.2f}x torch)   first loss {first[k]:.5f}")


if __name__ == "__main__":
    main()
