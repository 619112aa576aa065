"""ViT and CLIP against transformers on random-weight configs built here: ViT logits, CLIP text and image
features within 1e-4 relative (padded label batches included), zero-shot probabilities, CLIP's image
processor (numpy, bit-exact Pillow bicubic) against CLIPImageProcessor, `ember classify`."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.models.auto import from_pretrained

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                                 image_size=32, patch_size=8, num_labels=5,
                                 id2label={i: f"class{i}" for i in range(5)})
    ref = transformers.ViTForImageClassification(cfg).eval()
    folder = tmp_path_factory.mktemp("vit")
    ref.save_pretrained(folder, safe_serialization=True)
    return ref, folder


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.CLIPConfig(
        text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=16, eos_token_id=98),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8), projection_dim=24)
    ref = transformers.CLIPModel(cfg).eval()
    folder = tmp_path_factory.mktemp("clip")
    ref.save_pretrained(folder, safe_serialization=True)
    return ref, folder


def test_vit_logits_match_transformers(vit, device):
    ref, folder = vit
    x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = ref(pixel_values=torch.tensor(x)).logits.numpy()
    _close(from_pretrained(folder, device=device)(ember.tensor(x)).logits.numpy(), want)


def test_clip_features_and_zero_shot_match_transformers(clip, device):
    ref, folder = clip
    model = from_pretrained(folder, device=device)
    ids = np.array([[1, 5, 9, 98, 0, 0], [1, 7, 98, 0, 0, 0], [1, 4, 6, 8, 11, 98]])
    mask = (np.arange(6)[None] <= (ids == 98).argmax(1)[:, None]).astype(np.int64)
    px = np.random.default_rng(1).normal(size=(2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        t = ref.get_text_features(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))
        i = ref.get_image_features(pixel_values=torch.tensor(px))
        out = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), pixel_values=torch.tensor(px))
    t = getattr(t, "pooler_output", t).numpy()
    i = getattr(i, "pooler_output", i).numpy()
    _close(model.get_text_features(ids, mask).numpy(), t)
    _close(model.get_image_features(px).numpy(), i)
    got = model(input_ids=ids, pixel_values=px, attention_mask=mask)      # transformers' CLIPModel output fields
    for field in ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds"):
        _close(getattr(got, field).numpy(), getattr(out, field).numpy())
    np.testing.assert_allclose(model.zero_shot(px, ids, mask), out.logits_per_image.softmax(-1).numpy(), atol=1e-5)


def test_clip_processor_matches_transformers():
    from ember.models.clip.processor import preprocess
    rng = np.random.default_rng(0)
    for h, w in [(257, 300), (400, 224), (90, 120)]:
        img = (rng.random((h, w, 3)) * 255).astype(np.uint8)
        img[: h // 2] = 180  # flat regions and edges, not only noise
        want = transformers.CLIPImageProcessor()(images=PIL.fromarray(img), return_tensors="np")["pixel_values"][0]
        np.testing.assert_allclose(preprocess(img), want, atol=1e-5)


def test_ember_classify_vit_and_clip(vit, clip, tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from ember.cli import main
    img = (np.random.default_rng(2).random((40, 50, 3)) * 255).astype(np.uint8)
    PIL.fromarray(img).save(tmp_path / "x.png")
    ref, folder = vit
    assert main(["classify", str(tmp_path / "x.png"), "--model", str(folder), "--json", "--top", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    from ember.models.clip.processor import resize_bicubic
    x = (resize_bicubic(img, 32, 32).astype(np.float32) / 255 - 0.5) / 0.5
    with torch.no_grad():
        p = ref(pixel_values=torch.tensor(x.transpose(2, 0, 1)[None].copy())).logits.softmax(-1).numpy()[0]
    assert [o["label"] for o in out] == [f"class{i}" for i in np.argsort(-p)]
    np.testing.assert_allclose([o["score"] for o in out], np.sort(p)[::-1], atol=1e-5)

    cref, cfolder = clip
    tok = Tokenizer(models.WordLevel({**{f"w{i}": i for i in range(98)}, "<eot>": 98}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    from tokenizers.processors import TemplateProcessing
    tok.post_processor = TemplateProcessing(single="w1 $A <eot>", special_tokens=[("w1", 1), ("<eot>", 98)])
    tok.save(str(cfolder / "tokenizer.json"))
    assert main(["classify", str(tmp_path / "x.png"), "--model", str(cfolder), "--labels", "w5 w6,w7", "--no-template",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    from ember.models.clip.processor import preprocess
    ids, mask = np.array([[1, 5, 6, 98], [1, 7, 98, 0]]), np.array([[1, 1, 1, 1], [1, 1, 1, 0]])
    with torch.no_grad():
        p = cref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                 pixel_values=torch.tensor(preprocess(img, 32, 32)[None])).logits_per_image.softmax(-1).numpy()[0]
    assert {o["label"]: o["score"] for o in out} == pytest.approx({"w5 w6": p[0], "w7": p[1]}, abs=1e-5)
