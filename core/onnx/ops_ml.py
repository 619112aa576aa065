"""ai.onnx.ml operators on the host (traditional ML exports: skl2onnx, onnxmltools): LabelEncoder and
TreeEnsemble here; Binarizer and ArrayFeatureExtractor are in ops_math.py. Their inputs are small
feature matrices, so numpy runs them; numeric outputs go back to the session's device."""
from __future__ import annotations

import numpy as np

from .ops_string import as_text, is_text
from .registry import op
from .values import host
from .wire import OnnxFormatError

# ------------------------------------------------------------------ LabelEncoder

def _pairs(ctx, at, side):
    """The keys or values attribute that is set, as a list, with its kind: 'floats' | 'int64s' | 'strings' | 'tensor'."""
    for kind in ("floats", "int64s", "strings"):
        name = f"{side}_{kind}"
        if name in at:
            return (at.floats if kind == "floats" else at.ints if kind == "int64s" else at.strings)(name), kind
    if f"{side}_tensor" in at:
        t = at.tensor(f"{side}_tensor")
        return (as_text(t).tolist() if t.dtype == object else t.reshape(-1).tolist()), "tensor", t.dtype
    raise OnnxFormatError(f"ember: {ctx.where}: LabelEncoder has no {side}_* attribute")


_DEFAULTS = {"floats": ("default_float", -0.0, np.float32), "int64s": ("default_int64", -1, np.int64),
             "strings": ("default_string", "_Unused", object)}


@op("LabelEncoder", since=2, domain="ai.onnx.ml")
def _label_encoder(ctx, ins, at):
    k = _pairs(ctx, at, "keys")
    v = _pairs(ctx, at, "values")
    keys, values = k[0], v[0]
    if len(keys) != len(values):
        raise OnnxFormatError(f"ember: {ctx.where}: LabelEncoder has {len(keys)} keys and {len(values)} values")
    if v[1] == "tensor":
        d = at.tensor("default_tensor")
        otype = v[2]
        default = (as_text(d) if d is not None and d.dtype == object else d).reshape(-1)[0] if d is not None else \
            ("_Unused" if otype == object else -1 if np.dtype(otype).kind in "iu" else -0.0)
    else:
        name, fallback, otype = _DEFAULTS[v[1]]
        default = {"floats": at.f, "int64s": at.i, "strings": at.s}[v[1]](name, fallback)
    if ins[0] is None:
        raise OnnxFormatError(f"ember: {ctx.where}: LabelEncoder needs an input")
    x = ins[0] if is_text(ins[0]) else host(ins[0])
    if x.dtype.kind == "f":  # float keys: compare as the model's float32 does
        table = {float(np.float32(a)): b for a, b in zip(keys, values)}
        look = [table.get(float(s), default) for s in x.reshape(-1)]
    else:
        table = dict(zip(keys, values))
        look = [table.get(s if x.dtype == object else int(s), default) for s in x.reshape(-1)]
    if otype == object:
        out = np.empty(len(look), object)
        out[:] = look
        return out.reshape(x.shape)
    return ctx.const(np.array(look, otype).reshape(x.shape))


# ------------------------------------------------------------------ TreeEnsemble

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


@op("TreeEnsemble", since=5, domain="ai.onnx.ml")
def _tree_ensemble(ctx, ins, at):
    """Every sample walks every tree at once (one vectorised step per tree level); leaves add
    (SUM, AVERAGE) or fold (MIN, MAX) their weight into their target's column."""
    x = host(ins[0])
    if x.ndim != 2:
        raise OnnxFormatError(f"ember: {ctx.where}: TreeEnsemble input must be [N, F], got {list(x.shape)}")
    def t(name):
        return None if name not in at else np.asarray(at.tensor(name)).reshape(-1)
    modes, splits = t("nodes_modes").astype(np.int64), t("nodes_splits").astype(np.float64)
    feat, true_id, false_id = (np.asarray(at.ints(n), np.int64) for n in
                               ("nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids"))
    true_leaf, false_leaf = (np.asarray(at.ints(n), bool) for n in ("nodes_trueleafs", "nodes_falseleafs"))
    leaf_target, leaf_w = np.asarray(at.ints("leaf_targetids"), np.int64), t("leaf_weights").astype(np.float64)
    roots, n_targets = at.ints("tree_roots"), at.i("n_targets")
    miss = at.ints("nodes_missing_value_tracks_true")
    miss = np.zeros(len(modes), bool) if miss is None else np.asarray(miss, bool)
    agg, post = at.i("aggregate_function", 1), at.i("post_transform", 0)
    if post != 0:
        raise OnnxFormatError(f"ember: {ctx.where}: TreeEnsemble post_transform {post} is not supported")
    n = len(modes)
    if not all(len(a) == n for a in (splits, feat, true_id, false_id, true_leaf, false_leaf, miss)):
        raise OnnxFormatError(f"ember: {ctx.where}: TreeEnsemble nodes_* attributes differ in length")
    members = {}  # node -> its set (membership_values: one NaN-terminated run per MEMBER node, in order)
    if (modes == _MEMBER).any():
        vals, k = t("membership_values"), 0
        if vals is None:
            raise OnnxFormatError(f"ember: {ctx.where}: TreeEnsemble has set-membership nodes but no membership_values")
        for node in np.flatnonzero(modes == _MEMBER):
            run = []
            while k < len(vals) and not np.isnan(vals[k]):
                run.append(vals[k])
                k += 1
            k += 1
            members[node] = np.asarray(run)
    xs = x.astype(np.float64)
    rows = np.arange(len(xs))
    fill = {0: 0.0, 1: 0.0, 2: np.inf, 3: -np.inf}.get(agg)
    if fill is None:
        raise OnnxFormatError(f"ember: {ctx.where}: TreeEnsemble aggregate_function {agg}")
    out = np.full((len(xs), n_targets), fill)
    for root in roots:
        if true_leaf[root] and false_leaf[root] and true_id[root] == false_id[root]:  # the tree is one leaf
            leaf = np.full(len(xs), true_id[root])
        else:
            cur, leaf = np.full(len(xs), root), np.full(len(xs), -1)
            for _ in range(n + 1):
                live = leaf < 0
                if not live.any():
                    break
                c, r = cur[live], rows[live]
                v = xs[r, feat[c]]
                go = _compare(modes[c], v, splits[c], c, members) | (miss[c] & np.isnan(v))
                nxt = np.where(go, true_id[c], false_id[c])
                done = np.where(go, true_leaf[c], false_leaf[c])
                cur[live] = nxt
                leaf[np.flatnonzero(live)[done]] = nxt[done]
            if (leaf < 0).any():
                raise OnnxFormatError(f"ember: {ctx.where}: TreeEnsemble tree at node {root} does not end in leaves")
        w, tgt = leaf_w[leaf], leaf_target[leaf]
        if agg in (0, 1):
            np.add.at(out, (rows, tgt), w / len(roots) if agg == 0 else w)
        else:
            (np.minimum if agg == 2 else np.maximum).at(out, (rows, tgt), w)
    if agg in (2, 3):  # targets no leaf reached keep the dtype's extreme (the reference's start value)
        info = np.finfo(x.dtype if x.dtype.kind == "f" else np.float32)
        out[np.isinf(out)] = info.max if agg == 2 else info.min
    return ctx.const(out.astype(x.dtype if x.dtype.kind == "f" else np.float32))


def _compare(mode, v, split, node, members):
    go = np.select([mode == _LEQ, mode == _LT, mode == _GTE, mode == _GT, mode == _EQ, mode == _NEQ],
                   [v <= split, v < split, v >= split, v > split, v == split, v != split], False)
    for i in np.flatnonzero(mode == _MEMBER):
        go[i] = v[i] in members[node[i]]
    return go


# ------------------------------------------------------------------ preprocessing and linear models

def _features(ctx, x, what):
    """The input as a float matrix [N, C] (a vector is one sample), and its original rank."""
    a = host(x)
    if a.ndim > 2:
        raise OnnxFormatError(f"ember: {ctx.where}: {what} takes [C] or [N, C] features, got {list(a.shape)}")
    return np.atleast_2d(a), a.ndim


def _per_feature(ctx, values, c, what):
    v = np.asarray(values, np.float64)
    if v.size not in (1, c):
        raise OnnxFormatError(f"ember: {ctx.where}: {what} has {v.size} values for {c} features")
    return v


@op("Scaler", since=1, domain="ai.onnx.ml")
def _scaler(ctx, ins, at):
    x, nd = _features(ctx, ins[0], "Scaler")
    c = x.shape[1]
    y = (x - _per_feature(ctx, at.floats("offset", [0.0]), c, "offset")) * _per_feature(ctx, at.floats("scale", [1.0]), c, "scale")
    return ctx.const(y.astype(np.float32).reshape(host(ins[0]).shape))


@op("Normalizer", since=1, domain="ai.onnx.ml")
def _normalizer(ctx, ins, at):
    x, nd = _features(ctx, ins[0], "Normalizer")
    x = x.astype(np.float64)
    norm = at.s("norm", "MAX")
    if norm == "MAX":
        d = np.abs(x).max(1, keepdims=True)
    elif norm == "L1":
        d = np.abs(x).sum(1, keepdims=True)
    elif norm == "L2":
        d = np.sqrt((x * x).sum(1, keepdims=True))
    else:
        raise OnnxFormatError(f"ember: {ctx.where}: Normalizer norm {norm!r} (MAX, L1 or L2)")
    y = x / np.where(d == 0, 1.0, d)  # an all-zero row stays zero
    return ctx.const(y.astype(np.float32).reshape(host(ins[0]).shape))


@op("OneHotEncoder", since=1, domain="ai.onnx.ml")
def _one_hot_encoder(ctx, ins, at):
    cats = at.ints("cats_int64s") if "cats_int64s" in at else at.strings("cats_strings")
    if not cats:
        raise OnnxFormatError(f"ember: {ctx.where}: OneHotEncoder needs cats_int64s or cats_strings")
    x = ins[0] if is_text(ins[0]) else host(ins[0])
    index = {k: i for i, k in enumerate(cats)}
    keys = [s if x.dtype == object else int(s) for s in x.reshape(-1)]
    at_ = [index.get(k, -1) for k in keys]
    if not at.i("zeros", 1) and -1 in at_:
        raise OnnxFormatError(f"ember: {ctx.where}: OneHotEncoder: category {keys[at_.index(-1)]!r} is not in cats "
                              "(and zeros=0)")
    y = np.zeros((len(keys), len(cats)), np.float32)
    hit = np.asarray(at_) >= 0
    y[np.flatnonzero(hit), np.asarray(at_)[hit]] = 1
    return ctx.const(y.reshape(x.shape + (len(cats),)))


@op("Imputer", since=1, domain="ai.onnx.ml")
def _imputer(ctx, ins, at):
    a = host(ins[0])
    x, nd = _features(ctx, ins[0], "Imputer")
    if a.dtype.kind == "f":
        fill, missing = at.floats("imputed_value_floats", []), at.f("replaced_value_float", 0.0)
    else:
        fill, missing = at.ints("imputed_value_int64s", []), at.i("replaced_value_int64", 0)
    fill = _per_feature(ctx, fill, x.shape[1], "imputed_value_*").astype(a.dtype)
    hole = np.isnan(x) if a.dtype.kind == "f" and np.isnan(missing) else x == missing
    y = np.where(hole, np.broadcast_to(fill, x.shape), x)
    return ctx.const(y.reshape(a.shape))


@op("LinearRegressor", since=1, domain="ai.onnx.ml")
def _linear_regressor(ctx, ins, at):
    x, _ = _features(ctx, ins[0], "LinearRegressor")
    targets = at.i("targets", 1)
    coef = np.asarray(at.floats("coefficients", []), np.float64)
    if coef.size != targets * x.shape[1]:
        raise OnnxFormatError(f"ember: {ctx.where}: LinearRegressor has {coef.size} coefficients for "
                              f"{targets} targets x {x.shape[1]} features")
    icpt = np.asarray(at.floats("intercepts", [0.0] * targets), np.float64)
    if icpt.size != targets:
        raise OnnxFormatError(f"ember: {ctx.where}: LinearRegressor has {icpt.size} intercepts for {targets} targets")
    post = at.s("post_transform", "NONE")
    if post != "NONE":
        raise OnnxFormatError(f"ember: {ctx.where}: LinearRegressor post_transform {post!r} is not supported")
    y = x.astype(np.float64) @ coef.reshape(targets, -1).T + icpt
    return ctx.const(y.astype(np.float32))
