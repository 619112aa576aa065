"""ONNX operators computed on the host: those whose output *shape* depends on the values
(NonMaxSuppression, Unique), BitCast, which reinterprets bits no backend primitive exposes, and Det
(an LU factorization: pivoting is data-dependent control flow), and the random operators (numpy's
generator, seeded by the `seed` attribute when a model sets one).

Like NonZero, they read their inputs back (one transfer), compute in numpy and put the result on the
input's device, so they run on every backend; models use them once per run (NMS at the end of a
detector), not in inner loops.
"""
from __future__ import annotations

import numpy as np

from .guard import sized
from .registry import op
from .values import ember_dtype, host


def _boxes(b, center):
    """(N, 4) boxes as (x1, y1, x2, y2) with min <= max (ONNX allows flipped corners)."""
    b = b.astype(np.float64)
    if center:  # (x_center, y_center, width, height)
        return np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], 1)
    y1, x1, y2, x2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.stack([np.minimum(x1, x2), np.minimum(y1, y2), np.maximum(x1, x2), np.maximum(y1, y2)], 1)


def _iou(box, others):
    ix = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    iy = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = np.where((ix > 0) & (iy > 0), ix * iy, 0.0)
    a1 = (box[2] - box[0]) * (box[3] - box[1])
    a2 = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = a1 + a2 - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where((inter > 0) & (a1 > 0) & (a2 > 0) & (union > 0), inter / union, 0.0)
    return iou


@op("NonMaxSuppression", since=10)
def _nms(ctx, ins, at):
    boxes, scores = host(ins[0]), host(ins[1])
    opt = [host(v).reshape(-1) if v is not None else None for v in (list(ins[2:5]) + [None] * 3)[:3]]
    max_out = int(opt[0][0]) if opt[0] is not None and opt[0].size else 0
    iou_t = float(opt[1][0]) if opt[1] is not None and opt[1].size else 0.0
    score_t = float(opt[2][0]) if opt[2] is not None and opt[2].size else None
    center = at.i("center_point_box", 0)
    picked = []
    for b in range(boxes.shape[0]):
        bx = _boxes(boxes[b], center)
        for c in range(scores.shape[1]):
            s = scores[b, c].astype(np.float64)
            cand = np.arange(s.size) if score_t is None else np.nonzero(s > score_t)[0]
            order = cand[np.lexsort((cand, -s[cand]))]  # best score first, then the lower index
            kept = []
            for i in order:
                if len(kept) >= max_out:
                    break
                if not kept or not (_iou(bx[i], bx[kept]) > iou_t).any():
                    kept.append(int(i))
                    picked.append((b, c, int(i)))
    return ctx.const(np.array(picked, np.int64).reshape(-1, 3))


@op("Unique", since=11)
def _unique(ctx, ins, at):
    x = host(ins[0])
    ax = at.i("axis")
    if ax is None:
        y, first, inverse, counts = np.unique(x.reshape(-1), return_index=True, return_inverse=True,
                                              return_counts=True)
    else:
        ax = ax % x.ndim
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                              axis=ax)
    if not at.i("sorted", 1):  # in order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
        y = x.reshape(-1)[first] if ax is None else np.take(x, first, axis=ax)
    outs = [y, first, inverse.reshape(-1), counts]
    return [ctx.const(o if o.flags.c_contiguous else o.copy()) if k == 0 else ctx.const(np.asarray(o, np.int64))
            for k, o in enumerate(outs)][:max(len(at.node.output), 1)]


@op("BitCast", since=26)
def _bitcast(ctx, ins, at):
    x = host(ins[0])
    to = np.dtype(ember_dtype(at.i("to"), ctx.where).np)
    if to.itemsize != x.dtype.itemsize:
        raise ValueError(f"ember: {ctx.where}: BitCast from {x.dtype} to {to} changes the element size")
    return ctx.const((x if x.flags.c_contiguous else x.copy()).view(to))  # (ascontiguousarray makes 0-d 1-d)


@op("Det", since=11)
def _det(ctx, ins, at):
    x = host(ins[0])
    return ctx.const(np.linalg.det(x.astype(np.float64)).astype(x.dtype))


@op("TfIdfVectorizer", since=9)
def _tfidf(ctx, ins, at):
    """Counts of the pooled n-grams (integer tokens; elements of an n-gram up to max_skip_count apart) per
    row, as TF, IDF (the weight where present) or TFIDF. Token lookups are host work by nature."""
    x = host(ins[0])
    if x.dtype.kind not in "iu":
        raise ValueError(f"ember: {ctx.where}: TfIdfVectorizer over strings is not supported")
    pool = at.ints("pool_int64s", [])
    starts = at.ints("ngram_counts") + [len(pool)]
    cols = at.ints("ngram_indexes")
    weights = at.floats("weights", None)
    lo, hi, max_skip = at.i("min_gram_length"), at.i("max_gram_length"), at.i("max_skip_count", 0)
    table = {}  # (n-gram tuple) -> output column
    k = 0
    for n in range(1, len(starts)):
        for p in range(starts[n - 1], starts[n], n):
            table[tuple(pool[p:p + n])] = cols[k]
            k += 1
    width = max(cols) + 1 if cols else 0
    rows = x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
    out = np.zeros((rows.shape[0], width), np.float32)
    for r, row in enumerate(rows.tolist()):
        for n in range(max(lo, 1), hi + 1):
            for skip in range(max_skip + 1 if n > 1 else 1):
                step = skip + 1
                for s in range(len(row) - (n - 1) * step):
                    col = table.get(tuple(row[s:s + (n - 1) * step + 1:step]))
                    if col is not None:
                        out[r, col] += 1
    mode = at.s("mode", "TF")
    if mode != "TF":
        w = np.ones(width, np.float32)
        if weights is not None:  # weights[i] belongs to the i-th pooled n-gram, i.e. column ngram_indexes[i]
            w[np.asarray(cols)] = weights
        out = (out > 0) * w if mode == "IDF" else out * w
    return ctx.const(out.reshape(width) if x.ndim == 1 else out)


# ---------------------------------------------------------------------------- random (numpy's generator)

def _rng(at):
    seed = at.f("seed")
    return np.random.default_rng(None if seed is None else int(seed))


def _random(kind, like):
    def f(ctx, ins, at):
        if like:
            shape = tuple(ins[0].shape)
            dtype = ember_dtype(at.i("dtype"), ctx.where).np if at.i("dtype") else ins[0].dtype.np
        else:
            shape, dtype = tuple(at.ints("shape")), ember_dtype(at.i("dtype", 1), ctx.where).np
        shape = sized(at, "shape", shape, 8)  # (numpy draws float64)
        g = _rng(at)
        if kind == "normal":
            v = g.normal(at.f("mean", 0.0), at.f("scale", 1.0), shape)
        else:
            v = g.uniform(at.f("low", 0.0), at.f("high", 1.0), shape)
        return ctx.const(np.asarray(v, dtype))
    return f


op("RandomNormal", since=1)(_random("normal", False))
op("RandomUniform", since=1)(_random("uniform", False))
op("RandomNormalLike", since=1)(_random("normal", True))
op("RandomUniformLike", since=1)(_random("uniform", True))


@op("Bernoulli", since=15)
def _bernoulli(ctx, ins, at):
    p = host(ins[0])
    dtype = ember_dtype(at.i("dtype"), ctx.where).np if at.i("dtype") else p.dtype
    return ctx.const((_rng(at).random(p.shape) < p).astype(dtype))


@op("Multinomial", since=7)
def _multinomial(ctx, ins, at):
    logits = host(ins[0]).astype(np.float64)  # (batch, classes), unnormalized log-probabilities
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    n = at.i("sample_size", 1)
    sized(at, "sample_size", [p.shape[0], n], 8)
    g = _rng(at)
    out = np.stack([g.choice(p.shape[1], n, p=row) for row in p]) if p.size else np.zeros((0, n))
    return ctx.const(out.astype(ember_dtype(at.i("dtype", 6), ctx.where).np))


# ---------------------------------------------------------------------------- images

@op("ImageDecoder", since=20)
def _image_decoder(ctx, ins, at):
    """Encoded image bytes (uint8, 1-D) -> (H, W, 3) RGB / BGR or (H, W, 1) Grayscale uint8, decoded by Pillow
    where it is installed (as ember.data's image folders; Pyodide ships it), the decoder the operator's reference
    uses: every format it reads (JPEG, PNG, BMP, PNM, TIFF, WebP, JPEG 2000 ...). The header's size is checked
    against budget.max_pixels before any pixel is decoded."""
    import io

    from ..limits import check
    from .guard import node_error
    fmt = at.s("pixel_format", "RGB")
    if fmt not in ("RGB", "BGR", "Grayscale"):
        raise node_error(at, f"pixel_format {fmt!r} is not RGB, BGR or Grayscale")
    try:
        from PIL import Image
    except ImportError:
        raise node_error(at, "decoding images needs Pillow (pip install pillow; Pyodide ships it)") from None
    data = host(ins[0]).astype(np.uint8, copy=False).tobytes()
    try:
        with Image.open(io.BytesIO(data)) as im:
            check(at.where, f"node {at.node.name or 'ImageDecoder'!r} (ImageDecoder): image pixels",
                  im.width * im.height, "max_pixels")
            pixels = np.asarray(im.convert("L" if fmt == "Grayscale" else "RGB"), np.uint8)
    except Image.DecompressionBombError as e:
        raise node_error(at, f"the image is too large ({e})") from None
    except OSError as e:
        raise node_error(at, f"not an image Pillow can decode ({e})") from None
    if fmt == "Grayscale":
        pixels = pixels[:, :, None]
    elif fmt == "BGR":
        pixels = pixels[:, :, ::-1]
    return ctx.const(np.ascontiguousarray(pixels))
