"""The text tool's teach mode: LoRA fine-tuning of its loaded model on pasted text, in the worker
(ember.train.lora); with {"format": "chat"} the text is chat JSONL (one {"messages": [...]} a line, as `ember
finetune --data x.jsonl` takes), trained on the assistant turns only. llama.py's run() hands a request with
opts["teach"] here ("train", "export" or "reset").

It adapts the model the text tool holds, so generate and chat answer with the adapters as soon as a run ends
(the chat's KV cache is dropped: the weights changed). The loop is ember.models.text.finetune's LoraTuner (as
`ember finetune`'s): the text in blocks of `block` + 1 tokens, step i on block i mod n, AdamW on the adapters
only (blocks past RECOMPUTE_PAST tokens with gradient checkpointing). Between steps the loop awaits
checkpoint(): a cancel returns "paused" and {"resume": true} with the same options continues where it stopped.
"export" returns the adapter in PEFT's layout (adapter_config.json, adapter_model.safetensors bytes) for the page
to download; "reset" removes the adapters. Runs unchanged in CPython, which gives the e2e test its reference losses.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time

from . import WorkerError, checkpoint
from . import llama as text_tool

LIMITS = {"steps": (1, 10_000), "rank": (1, 256), "block": (2, 1024), "seed": (0, 2 ** 31 - 1)}
MAX_TEXT = 1 << 20  # characters
RECOMPUTE_PAST = 128  # tokens: longer blocks train with gradient checkpointing (same losses; a 512-token block's
#                       activations, one decoder block's at a time, fit the page's memory)
_SESSION: dict = {}  # "key": the model, text and options it was started with; "tuner": the LoraTuner


def _model():
    model, tok = text_tool._STATE.get("model"), text_tool._STATE.get("tokenizer")
    if model is None or tok is None:
        raise WorkerError("ember: load a text model first: teaching adapts the loaded model", "not_loaded")
    return model, tok


def _options(opts: dict) -> dict:
    out = {"steps": 20, "rank": 8, "alpha": None, "lr": 1e-3, "block": 64, "seed": 0, "format": "text"}
    for k in out:
        if opts.get(k) is not None:
            out[k] = opts[k]
    try:
        for k in ("steps", "rank", "block", "seed"):
            if isinstance(out[k], bool) or float(out[k]) != int(out[k]):
                raise ValueError(f"{k}={out[k]!r} is not an integer")
            out[k] = int(out[k])
        out["lr"] = float(out["lr"])
        out["alpha"] = float(out["alpha"] if out["alpha"] is not None else 2 * out["rank"])
    except (TypeError, ValueError) as e:
        raise WorkerError(f"ember: bad teach option ({e})", "bad_request") from None
    if out["format"] not in ("text", "chat"):
        raise WorkerError(f"ember: format must be 'text' or 'chat' (JSONL conversations), got {out['format']!r}",
                          "bad_request")
    for k, (lo, hi) in LIMITS.items():
        if not lo <= out[k] <= hi:
            raise WorkerError(f"ember: {k} must be between {lo} and {hi}, got {out[k]}", "bad_request")
    if not 0 < out["lr"] <= 1 or not math.isfinite(out["alpha"]):
        raise WorkerError(f"ember: lr must be in (0, 1] and alpha finite, got lr={out['lr']}, alpha={out['alpha']}",
                          "bad_request")
    return out


def _forget_caches():
    """The weights changed: a chat's cached keys/values of earlier turns are stale."""
    engine = text_tool._STATE.get("engine")
    if engine is not None:
        engine.prefix.reset()


def reset() -> dict:
    from ember.train import lora
    model, _ = _model()
    had = bool(lora.lora_layers(model))
    lora.unload(model)
    _SESSION.clear()
    _forget_caches()
    return {"reset": had}


def export() -> dict:
    """The adapters in PEFT's layout: {"adapter_config.json": text, "adapter_model.safetensors": bytes}."""
    from ember.io import safetensors
    from ember.train import lora
    from ember.train.lora.peft_format import config_dict
    model, _ = _model()
    if not lora.lora_layers(model):
        raise WorkerError("ember: nothing to download yet: teach the model first", "not_loaded")
    tensors = {k: p.detach().float().to("cpu") for k, p in lora.adapter_tensors(model).items()}
    return {"adapter_config.json": json.dumps(config_dict(model.lora_config), indent=2),
            "adapter_model.safetensors": safetensors.dumps(tensors, metadata={"format": "pt"})}


def _start(text, o: dict, model, tok, key) -> dict:
    from ember.data import ChatDataError
    from ember.errors import LimitError
    from ember.models.text.finetune import FinetuneError, LoraTuner, chat_examples
    if isinstance(text, str) and len(text) > MAX_TEXT:
        raise WorkerError(f"ember: the text has {len(text)} characters, over the limit of {MAX_TEXT}", "bad_request")
    text = text if isinstance(text, str) else ""
    try:
        data = chat_examples("the chat data", tok, o["block"], text=text) if o["format"] == "chat" else text
        tuner = LoraTuner(model, tok, data, rank=o["rank"], alpha=o["alpha"],
                          lr=o["lr"], block=o["block"], seed=o["seed"], checkpointing=o["block"] > RECOMPUTE_PAST)
    except (FinetuneError, ChatDataError, LimitError) as e:  # the text or the conversations cannot train
        raise WorkerError(str(e), "bad_request") from None
    _SESSION.clear()
    _SESSION.update(key=key, tuner=tuner, seconds=0.0)
    return _SESSION


async def train(text, opts: dict, on_step=None) -> dict:
    """-> {"losses", "step", "steps", "stopped": "done" | "paused", "steps_per_s", "seconds", "examples", "block"};
    examples: the text's blocks or the conversations trained on, step i on example i mod examples; block: the
    longest one's tokens.
    on_step({"kind": "step", "step", "steps", "loss"}) after each step."""
    o = _options(opts)
    model, tok = _model()
    key = (id(model), hashlib.sha256(str(text).encode()).hexdigest(), tuple(sorted(o.items())))
    s = _SESSION if opts.get("resume") and _SESSION.get("key") == key else _start(text, o, model, tok, key)
    tuner = s["tuner"]
    stopped, t0, step0 = "done", time.perf_counter(), tuner.steps_done
    _forget_caches()
    try:
        while tuner.steps_done < o["steps"]:
            loss = round(tuner.step(), 6)
            if on_step is not None:
                on_step({"kind": "step", "step": tuner.steps_done, "steps": o["steps"], "loss": loss})
            await checkpoint()
    except asyncio.CancelledError:
        stopped = "paused"
    secs = time.perf_counter() - t0
    s["seconds"] += secs
    return {"losses": [round(v, 6) for v in tuner.losses], "step": tuner.steps_done, "steps": o["steps"],
            "stopped": stopped, "steps_per_s": round((tuner.steps_done - step0) / secs, 3) if secs > 0 else 0.0,
            "seconds": round(s["seconds"], 3), "examples": len(tuner.examples),
            "block": max(len(inputs) for inputs, _ in tuner.examples)}


async def run(input, opts: dict, on_partial=None) -> dict:
    action = opts.get("teach")
    if action == "export":
        return export()
    if action == "reset":
        return reset()
    if action != "train":
        raise WorkerError(f"ember: unknown teach action {action!r}; expected train, export or reset", "bad_request")
    return await train(input, opts, on_partial)
