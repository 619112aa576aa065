"""A fixed battery of ember ops on seeded inputs, executed unchanged by CPython and by Pyodide.

Run as a script (exec, or PyodideSession.run): it binds `result` = {name: [dtype, shape,
base64 of the array's raw little-endian bytes]}, so the two runs can be compared bit for bit
(tests/test_pyodide_runtime.py). Not collected by pytest (no test_ prefix).
"""
import base64

import numpy as np

import ember
import ember.nn.functional as F

# The legacy RandomState stream is frozen across numpy versions (2.4 here, 2.0.2 in Pyodide).
rs = np.random.RandomState(0)


def randn(*shape):
    return ember.tensor(rs.standard_normal(shape).astype(np.float32))


out = {}


def record(name, t):
    arr = t.numpy() if isinstance(t, ember.Tensor) else np.asarray(t)
    out[name] = [str(arr.dtype), list(arr.shape), base64.b64encode(arr.tobytes()).decode()]


# ---------------------------------------------------------------- elementwise
a, b = randn(4, 5), randn(4, 5)  # (4, 5) each
record("add", a + b)
record("sub_scalar", a - 0.5)
record("mul", a * b)
record("div", a / (b.abs() + 0.5))
record("pow", (a.abs() + 0.5) ** b)
record("maximum", ember.maximum(a, b))
record("exp", a.exp())
record("log", (a.abs() + 0.1).log())
record("sin", a.sin())
record("cos", a.cos())
record("tanh", a.tanh())
record("sqrt", a.abs().sqrt())
record("rsqrt", (a.abs() + 0.1).rsqrt())
record("sigmoid", a.sigmoid())
record("erf", ember.erf(a))
record("relu", ember.relu(a))
record("where", ember.where(a > b, a, b))
record("gt", a > b)
record("clamp", a.clamp(-0.5, 0.5))
record("floor", (a * 3).floor())
record("broadcast", a + randn(5))

# ---------------------------------------------------------------- reductions
record("sum_dim1", a.sum(dim=1))
record("mean_all", a.mean())
values, indices = a.max(dim=0)
record("max_dim0_values", values)
record("max_dim0_indices", indices)
record("argmax_dim1", a.argmax(dim=1))
record("var_dim1", a.var(dim=1))
record("cumsum_dim1", a.cumsum(dim=1))
record("logsumexp_dim1", ember.logsumexp(a, dim=1))
record("prod_dim0", a.prod(dim=0))

# ---------------------------------------------------------------- matmul, softmax, norms
w = randn(5, 3)
record("matmul", a @ w)  # (4, 3)
record("matmul_batched", randn(2, 4, 5) @ w)  # (2, 4, 3)
record("softmax", F.softmax(a, dim=-1))
record("log_softmax", F.log_softmax(a, dim=0))
record("layer_norm", F.layer_norm(a, (5,), randn(5), randn(5)))

# ---------------------------------------------------------------- convolution
x = randn(2, 3, 8, 8)  # (batch, in_ch, h, w)
record("conv2d", F.conv2d(x, randn(4, 3, 3, 3), randn(4), stride=2, padding=1))  # (2, 4, 4, 4)
record("conv2d_groups_dilation", F.conv2d(x, randn(6, 1, 3, 3), groups=3, dilation=2))
record("max_pool2d", F.max_pool2d(x, 2))

# ---------------------------------------------------------------- indexing and movement
idx = ember.tensor(np.array([[0, 4], [1, 1], [3, 2], [2, 0]], dtype=np.int64))  # (4, 2)
record("slice", a[1:3, ::2])
record("index_list", a[[0, 2]])
record("gather", ember.gather(a, 1, idx))
record("masked_select", a[a > 0])
record("scatter_add", ember.zeros(4, 5).scatter_add(1, idx, b[:, :2]))
record("permute_reshape", x.permute(0, 2, 3, 1).reshape(2, -1))
record("cat", ember.cat([a, b], dim=0))
record("flip", a.flip(1))
record("pad", F.pad(a, (1, 2)))

# ---------------------------------------------------------------- autograd: a small MLP
inputs, targets = randn(8, 5), ember.tensor(rs.randint(0, 3, size=8).astype(np.int64))
w1, b1 = randn(5, 16).requires_grad_(), randn(16).requires_grad_()  # (in, hidden), (hidden,)
w2, b2 = randn(16, 3).requires_grad_(), randn(3).requires_grad_()  # (hidden, classes)
hidden = (inputs @ w1 + b1).tanh()  # (8, 16)
loss = F.cross_entropy(hidden @ w2 + b2, targets)
loss.backward()
record("mlp_loss", loss.detach())
for name, param in {"w1": w1, "b1": b1, "w2": w2, "b2": b2}.items():
    record(f"mlp_grad_{name}", param.grad)

# conv backward through a pooled sum
xc, wc = randn(1, 2, 6, 6).requires_grad_(), randn(3, 2, 3, 3).requires_grad_()
F.max_pool2d(F.conv2d(xc, wc, padding=1).relu(), 2).sum().backward()
record("conv_grad_input", xc.grad)
record("conv_grad_weight", wc.grad)

# ---------------------------------------------------------------- nn layers (weights from the frozen stream)
import ember.nn as nn  # noqa: E402


def seeded(module):
    module.load_state_dict({k: randn(*v.shape) * 0.3 for k, v in module.state_dict().items()})
    return module


seq = randn(2, 6, 8).requires_grad_()                                     # (batch, steps, features)
mha = seeded(nn.MultiheadAttention(8, 2, batch_first=True))
y, w = mha(seq, seq, seq, key_padding_mask=ember.tensor(np.array([[False] * 6, [False] * 4 + [True] * 2])))
record("mha_out", y.detach())
record("mha_weights", w.detach())
enc = seeded(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True))
record("encoder_layer", enc(seq, is_causal=True, src_mask=nn.Transformer.generate_square_subsequent_mask(6)).detach())
lstm = seeded(nn.LSTM(8, 5, 2, bidirectional=True, batch_first=True, proj_size=3))
out_l, (h_l, c_l) = lstm(seq, lengths=[6, 3])
(out_l.sum() + c_l.sum()).backward()
record("lstm_out", out_l.detach())
record("lstm_grad_input", seq.grad)
with ember.no_grad():  # the registry's gru_cell / lstm_cell kernels (recurrent.c in the wasm module)
    record("gru_out", seeded(nn.GRU(8, 5))(seq.detach())[0])
    record("lstm_nograd_out", seeded(nn.LSTM(8, 5, bidirectional=True))(seq.detach())[0])
record("moe", seeded(nn.MoE(8, 12, num_experts=4, num_experts_per_tok=2))(seq.detach()))
record("ce_smooth", nn.CrossEntropyLoss(label_smoothing=0.1)(randn(5, 4), ember.tensor(np.array([0, 3, 1, -100, 2]))))
record("unfold_fold", F.fold(F.unfold(randn(1, 2, 5, 5), 3, padding=1), 5, 3, padding=1))
record("embedding_bag", seeded(nn.EmbeddingBag(10, 4, mode="max"))(ember.tensor(np.array([1, 2, 4, 5, 9])),
                                                                  ember.tensor(np.array([0, 2]))))

result = out
