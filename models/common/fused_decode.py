"""One decoded token through every layer in one call, where the model's device has a kernel for the registry's
`decoder_plan` op (ember.kernels; the CPU backend's compiled kernels: cpu_kernels/decode.c): a token of Gemma 3 270M is ~700 small
tensor ops in Python, ~20 ms natively and ~30 ms in the page, around its ~130 matmuls.

The model describes itself, backend-free: each block's `decode_parts()` (the arrays its norms and projections
hold, or None for a kind of block the primitive does not compute) and CausalLM gathers them into a spec (see
ember.backends.cpu_decode for its fields). Anything else (a prompt of several tokens, padding, a batch, gradients,
biases, ALiBi, partial rotary, float32-activation quantized weights) runs the layers op by op, the composed path
the fused one is tested against (tests/test_fused_decode.py).
"""
from __future__ import annotations

import operator

import numpy as np

import ember
from ember import kernels, nn
from ember.quant import QLinear, QTensor

from .positions import cos_sin

# config.json activation names decode.c computes
ACTS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "silu": "silu",
        "swish": "silu"}
F32_EPS = 1.1920928955078125e-07  # F.rms_norm's eps when a norm has none (float32)


def linear_weight(m, sources):
    """(data, GGML type, rows, cols) of a bias-free projection as decode.c takes it, or None: a QLinear multiplying
    as llama.cpp does (its GGML blocks), or a float32 nn.Linear ((out, in) rows, type 0, or the CPU backend's
    input-major layout, type -1; the plan is only asked of a device whose kernel reads host arrays). `sources` gets
    what the plan's arrays were read from."""
    if getattr(m, "bias", None) is not None:
        return None
    if isinstance(m, QLinear):
        w = m.weight
        if w.activations != "q8":
            return None
        sources.append((m, w, w.data))
        return w.data, w.ggml_type.id, w.shape[0], w.shape[1]
    if type(m) is nn.Linear and m.weight.dtype is ember.float32:
        a = m.weight._data
        out, cols = a.shape
        sources.append((m, m.weight, a))
        if a.flags.c_contiguous:
            return a, 0, out, cols
        if a.T.flags.c_contiguous:
            return a.T, -1, out, cols
    return None


def rms_norm_parts(m, sources):
    """(weight float32 array, eps) of an nn.RMSNorm with a float32 weight, else None."""
    if type(m) is not nn.RMSNorm or m.weight is None or m.weight.dtype is not ember.float32 or len(m.normalized_shape) != 1:
        return None
    sources.append((m, m.weight, m.weight._data))
    return m.weight._data, float(F32_EPS if m.eps is None else m.eps)


def held(owner, name, sources):
    """owner's submodule `name`, noted in `sources` so that a plan is rebuilt once another module takes its place
    (a LoRA wrapper around a projection)."""
    child = getattr(owner, name)
    sources.append((HELD, owner, name, child))
    return child


HELD = object()


def unchanged(sources):
    """A check, made once per plan, of whether every module still holds the weight, with the same array, that the
    plan was built from (a weight replaced, loaded anew, moved to another device or set to float32 activations
    changes one), and every module noted by held() is still in its place: () -> bool. It runs every decoded
    token, so it compares whole columns with map() (~300 entries for a 30-layer model: ~50 us, not ~190 as a
    loop over the entries)."""
    owners, names, children, mods, weights, plain, plain_data, quant, quant_data = ([] for _ in range(9))
    for entry in sources:
        if entry[0] is HELD:
            owners.append(entry[1])
            names.append(entry[2])
            children.append(entry[3])
            continue
        module, w, data = entry
        mods.append(module)
        weights.append(w)
        if isinstance(w, QTensor):
            quant.append(w)
            quant_data.append(data)
        else:
            plain.append(w)
            plain_data.append(data)
    weight, array, blocks, acts = (operator.attrgetter(a) for a in ("weight", "_data", "data", "activations"))
    is_not = operator.is_not
    q8 = ["q8"] * len(quant)  # (one list comparison in C: a generator over SmolLM2's 210 weights was ~10 us a token)

    def check() -> bool:
        return not (any(map(is_not, map(getattr, owners, names), children))
                    or any(map(is_not, map(weight, mods), weights))
                    or any(map(is_not, map(array, plain), plain_data))
                    or any(map(is_not, map(blocks, quant), quant_data))
                    or list(map(acts, quant)) != q8)
    return check


def model_spec(model, sources):
    """The spec of a CausalLM's layers for the decoder_plan primitive, or None; `sources` gets what its arrays
    were read from (unchanged() tells whether they still hold)."""
    if model.alibi or model.n_heads % model.n_kv_heads:
        return None
    ropes = model.rope if isinstance(model.rope, list) else [model.rope] * model.n_layers
    if any(r is None or not r._fused_ok for r in ropes):
        return None
    kinds = list({id(r): r for r in ropes}.values())
    layers, eps, act, scale = [], set(), set(), set()
    for block, rope in zip(model.blocks(), ropes):
        parts = getattr(block, "decode_parts", lambda sources: None)(sources)
        if parts is None:
            return None
        eps.update(parts.pop("eps"))
        act.add(parts.pop("act"))
        scale.add(parts.pop("scale"))
        parts["rope"] = next(i for i, r in enumerate(kinds) if r is rope)
        layers.append(parts)
    if len(eps) != 1 or len(act) != 1 or len(scale) != 1:
        return None
    hidden = {p["gate"][2] for p in layers}
    if len(hidden) != 1:
        return None
    # the final norm too, where it is the toolkit's model.norm (not an overridden final_norm) and an RMSNorm alike
    from .decoder import CausalLM
    final = rms_norm_parts(model.model.norm, sources) if type(model).final_norm is CausalLM.final_norm and \
        isinstance(getattr(getattr(model, "model", None), "norm", None), nn.RMSNorm) else None
    if final is not None and final[1] != next(iter(eps)):
        final = None
    return {"dim": layers[0]["q"][3], "heads": model.n_heads, "kv_heads": model.n_kv_heads,
            "head_dim": model.head_dim, "hidden": hidden.pop(), "act": act.pop(), "eps": eps.pop(),
            "scale": scale.pop(), "layers": layers, "ropes": kinds, "norm_final": None if final is None else final[0]}


def split_rows(w, *counts):
    """A weight of stacked projections ([q | k | v], [gate | up]) as one weight per block of rows: views of its
    array (a float32 input-major one keeps its row stride, decode.c reads the leading dimension)."""
    if w is None:
        return (None,) * len(counts)
    data, type_id, rows, cols = w
    out, start = [], 0
    for n in counts:
        part = data[:, start:start + n] if type_id == -1 else data[start:start + n]
        out.append((part, type_id, n, cols))
        start += n
    return tuple(out) if start == rows else (None,) * len(counts)


def attention_parts(attn, sources):
    """An Attention's projections, q/k norms and scale for decode.c, or None."""
    if attn.names[3] is None:
        return None
    H, K, hd = attn.n_heads, attn.n_kv, attn.hd
    if attn.fused:
        q, k, v = split_rows(linear_weight(held(attn, attn.fused, sources), sources), H * hd, K * hd, K * hd)
    else:
        q, k, v = (linear_weight(held(attn, n, sources), sources) for n in attn.names[:3])
    o = linear_weight(held(attn, attn.names[3], sources), sources)
    if None in (q, k, v, o):
        return None
    parts = {"q": q, "k": k, "v": v, "o": o, "norm_q": None, "norm_k": None, "eps": set(),
             "scale": float(np.float32(attn.scale if attn.scale is not None else attn.hd ** -0.5))}
    if attn.qk_norm:
        nq, nk = rms_norm_parts(attn.q_norm, sources), rms_norm_parts(attn.k_norm, sources)
        if nq is None or nk is None:
            return None
        parts["norm_q"], parts["norm_k"] = nq[0], nk[0]
        parts["eps"].update((nq[1], nk[1]))
    return parts


def gated_mlp_parts(mlp, sources):
    """A GatedMLP's gate/up/down and activation for decode.c, or None."""
    if mlp.act_name not in ACTS:
        return None
    if mlp.fused:
        gate, up = split_rows(linear_weight(held(mlp, mlp.fused, sources), sources), mlp.hidden, mlp.hidden)
    else:
        gate, up = (linear_weight(held(mlp, n, sources), sources) for n in mlp.names[:2])
    down = linear_weight(held(mlp, mlp.names[2], sources), sources)
    return None if None in (gate, up, down) else {"gate": gate, "up": up, "down": down, "act": ACTS[mlp.act_name]}


def block_parts(sources, attn, mlp, norm_attn, norm_ffn, post_attn=None, post_ffn=None):
    """A pre-norm block's parts (with post norms: Gemma's sandwich) for decode.c, or None."""
    a, m = attention_parts(attn, sources), gated_mlp_parts(mlp, sources)
    norms = [rms_norm_parts(n, sources) if n is not None else (None, None)
             for n in (norm_attn, norm_ffn, post_attn, post_ffn)]
    if a is None or m is None or any(n is None for n in norms) or norms[0][0] is None or norms[1][0] is None:
        return None
    eps = a.pop("eps") | {e for _, e in norms if e is not None}
    return {**a, **m, "eps": eps, "norm_attn": norms[0][0], "norm_ffn": norms[1][0],
            "norm_attn_post": norms[2][0], "norm_ffn_post": norms[3][0]}


class FusedDecoder:
    """A CausalLM's plan (built once per device and set of weights) and the step that runs a token through it."""

    def __init__(self, model):
        self.model, self._plan, self._unchanged, self._like, self._spec = model, None, None, None, None

    # a copied or unpickled model gets a fresh decoder: a plan holds the addresses of the arrays it was built from,
    # which a copy does not own (and may outlive)
    def __getstate__(self):
        return {"model": self.model}

    def __setstate__(self, state):
        self.__init__(state["model"])

    def plan(self):
        """The device's plan for the model's current weights, or None: built at the first step, again when a
        weight changed (the unchanged() check: ~50 us a step instead of rebuilding the spec's ~500)."""
        if self._unchanged is not None and self._unchanged():
            return self._plan
        build = kernels.bound("decoder_plan", self.model.device.backend)
        sources = []
        spec = None if build is None else model_spec(self.model, sources)
        self._plan = None if spec is None else build(spec)
        self._spec, self._unchanged = spec, (unchanged(sources) if self._plan is not None else None)
        return self._plan

    def step(self, plan, x, cache):
        """x (1, 1, dim) at position cache.pos through every layer (and the final norm where the plan has it:
        plan.final_norm); the cache advances."""
        m = self.model
        pos = cache.pos
        rope = np.stack([np.concatenate(cos_sin(r.angles(pos))) for r in self._spec["ropes"]])
        if self._like is None:
            self._like = ember.zeros(1, m.n_kv_heads, 1, m.head_dim)
        caches = [(kbuf._data, vbuf._data, slot, length)
                  for kbuf, vbuf, slot, length in (cache.slot(i, self._like) for i in range(m.n_layers))]
        xv = np.array(x.numpy().reshape(-1), np.float32)
        plan.step(xv, rope, caches, cache.writes)
        cache.pos += 1
        return ember.tensor(xv.reshape(1, 1, -1))
