"""The zoo's pure-Python path inside Pyodide under Node: random-weight BERT, RoBERTa, DistilBERT, every
causal LM of test_zoo_causal (GPT-2, GPTBigCode, Mistral, Qwen2/3, Phi-2/3, Gemma, GLM, StarCoder2, Falcon, Llama 3
scaling ...), T5 (relative bias, generation), ViT and CLIP folders built here with transformers
load through ember.models.auto.from_pretrained in Pyodide and give CPython's outputs: the same code (MODELS
below) runs on both sides; hidden states, logits and features within float32 summation-order noise (Pyodide's
matmuls run on the wasm SIMD128 kernels, CPython's on BLAS), greedy tokens equal. One Node process, one snippet."""
from __future__ import annotations

import numpy as np
import pytest
from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401  (fixture)
from test_bert import CONFIGS as ENCODERS
from test_zoo_causal import CONFIGS as CAUSAL
from zoo_reference import causal_lm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V = 99
ENC = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=32,
              patch_size=8)


def _configs():
    t = transformers
    return {
        "bert": lambda: t.BertModel(t.BertConfig(**ENC, max_position_embeddings=64)),
        "roberta": lambda: t.RobertaModel(t.RobertaConfig(**ENC, max_position_embeddings=70, pad_token_id=1)),
        "distilbert": lambda: t.DistilBertModel(ENCODERS["distilbert"]()),
        **{f"causal-{k}": (lambda make=make: causal_lm(make())) for k, make in CAUSAL.items()},
        "t5": lambda: t.T5ForConditionalGeneration(t.T5Config(
            vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2, num_heads=4,
            relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
            decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)),
        "vit": lambda: t.ViTForImageClassification(t.ViTConfig(**VISION, num_labels=5)),
        "clip": lambda: t.CLIPModel(t.CLIPConfig(
            text_config=dict(vocab_size=V, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=16, eos_token_id=98),
            vision_config=VISION, projection_dim=24)),
    }


# Runs in CPython and in Pyodide: {kind: {output name: array as nested lists}} for the folders under `root`.
MODELS = '''
import numpy as np
import ember
from ember.models.auto import from_pretrained
from ember.models.common.generate import SamplingParams, generate

def run_zoo(root, kinds):
    rng = np.random.default_rng(0)
    ids = rng.integers(2, 98, (2, 9))
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    px = rng.normal(size=(2, 3, 32, 32)).astype(np.float32)
    logits = lambda out: getattr(out, "logits", out).numpy()
    out = {}
    with ember.no_grad():
        for kind in ("bert", "roberta", "distilbert"):
            m = from_pretrained(f"{root}/{kind}")
            out[kind] = {"hidden": m(ids, attention_mask=mask).last_hidden_state.numpy()}
        for kind in (k for k in kinds if k.startswith("causal-")):
            m = from_pretrained(f"{root}/{kind}")
            out[kind] = {"logits": logits(m(ember.tensor(ids))),
                         "greedy": np.array(list(generate(m, ids[0].tolist(), 6, SamplingParams(0.0))))}
        m = from_pretrained(f"{root}/t5")
        out["t5"] = {"logits": logits(m(ids, ids[:, :5], attention_mask=mask)),
                     "greedy": np.array(m.generate(ids[:1], 6)[0])}
        out["vit"] = {"logits": from_pretrained(f"{root}/vit")(ember.tensor(px)).logits.numpy()}
        m = from_pretrained(f"{root}/clip")
        out["clip"] = {"text": m.get_text_features(ids, mask).numpy(), "image": m.get_image_features(px).numpy()}
    return {k: {n: np.asarray(a).tolist() for n, a in v.items()} for k, v in out.items()}
'''


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    for kind, build in _configs().items():
        torch.manual_seed(0)
        build().eval().save_pretrained(root / kind, safe_serialization=True)
    return root


def test_zoo_in_pyodide_gives_the_cpython_outputs(zoo, pyodide_dist):  # noqa: F811
    ns = {}
    exec(MODELS, ns)
    want = ns["run_zoo"](str(zoo), sorted(_configs()))
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    with PyodideSession(dist=pyodide_dist, mounts={"/zoo": zoo}) as session:
        got = session.run(MODELS + f"\nresult = run_zoo('/zoo', {sorted(_configs())!r})", timeout=600)["result"]
    assert got.keys() == want.keys() == set(_configs())
    for kind, outs in want.items():
        for name, w in outs.items():
            g, w = np.asarray(got[kind][name]), np.asarray(w)
            assert g.shape == w.shape, (kind, name)
            if name == "greedy":
                assert g.tolist() == w.tolist(), (kind, g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max(), err_msg=f"{kind} {name}")
