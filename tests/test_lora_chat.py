"""Chat-formatted fine-tuning data (ember.data.ChatExamples, `ember finetune --data file.jsonl`), references computed
here: the ids and the assistant-only mask equal transformers' apply_chat_template on each prefix conversation (a
turn's tokens are the difference of two prefixes' token counts) with the tiny ChatML folder's tokenizer and with
the real SmolLM2 GGUF's (its template adds a default system message); the first step's masked loss equals torch's
cross-entropy with ignore_index on transformers' logits for the same model; `ember finetune` on a JSONL file
trains and writes an adapter; hostile JSONL lines are refused with the file and the line named."""
from __future__ import annotations

import json

import numpy as np
import pytest

import chat_folder
from ember.cli import main as cli_main
from ember.data import ChatDataError, ChatExamples, read_chat_jsonl
from ember.data.chat import IGNORE_INDEX, masked_ids
from ember.errors import LimitError
from ember.models.text import load_text_model
from ember.models.text.finetune import LoraTuner, chat_examples

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello world"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And café in 日本語?"},
     {"role": "assistant", "content": "{\"a\": 1} 👍"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "Fine."},
     {"role": "assistant", "content": "naïve"}],
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return chat_folder.build(tmp_path_factory.mktemp("chat") / "m")


def reference(hf_tok, msgs):
    """(ids, mask) from transformers alone: whole-conversation ids, and for each assistant message i the tokens
    between the prefix messages[:i] with the generation prompt and the prefix messages[:i + 1] (for i = 0, the
    tokens before the reply's own)."""
    def ids(m, gen):
        out = hf_tok.apply_chat_template(m, add_generation_prompt=gen, tokenize=True)
        return list(out["input_ids"] if hasattr(out, "keys") else out)
    def opening(m):  # transformers renders no empty conversation: what two one-reply conversations share
        a, b = ids([{**m, "content": "A"}], False), ids([{**m, "content": "B"}], False)
        return a[:next(k for k, (x, y) in enumerate(zip(a, b)) if x != y)]
    full = ids(msgs, False)
    mask = np.zeros(len(full), bool)
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            head, turn = ids(msgs[:i], True) if i else opening(m), ids(msgs[:i + 1], False)
            assert full[:len(turn)] == turn and turn[:len(head)] == head
            mask[len(head):len(turn)] = True
    return np.asarray(full), mask


def check_masks(tok, hf_tok):
    for msgs in CONVERSATIONS:
        ids, mask = masked_ids(msgs, tok.chat_template.render, lambda t: tok.encode(t, bos=False, special=True))
        ref_ids, ref_mask = reference(hf_tok, msgs)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_array_equal(mask, ref_mask)
        assert mask.any() and not mask.all()


def test_mask_equals_transformers_prefix_diffs(folder):
    _, tok = load_text_model(folder, activations="float32")
    check_masks(tok, transformers.AutoTokenizer.from_pretrained(folder))


def test_mask_equals_transformers_smollm2():
    from smollm2_assets import smollm2_gguf
    from ember.io.gguf import metadata
    from ember.models.common.tokenizer import tokenizer_from_gguf
    path = smollm2_gguf()
    tok = tokenizer_from_gguf(metadata(path), str(path))
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    check_masks(tok, hf_tok)


def test_masked_loss_equals_torch_cross_entropy(folder, device):
    model, tok = load_text_model(folder, device=device, activations="float32")
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    render = tok.chat_template.render
    ds = ChatExamples(CONVERSATIONS, render, lambda t: tok.encode(t, bos=False, special=True), max_tokens=64)
    for k, msgs in enumerate(CONVERSATIONS):
        ref_ids, ref_mask = reference(hf_tok, msgs)
        ref_ids, ref_mask = ref_ids[:65], ref_mask[:65]
        inputs, labels = ds[k]
        np.testing.assert_array_equal(inputs, ref_ids[:-1])
        ref_labels = torch.tensor(np.where(ref_mask[1:], ref_ids[1:], -100))
        tuner = LoraTuner(model, tok, ChatExamples([msgs], render, lambda t: tok.encode(t, bos=False, special=True),
                                                   max_tokens=64), rank=2, seed=0)
        got = tuner.step()  # B starts at zero: the step's loss is the base model's
        with torch.no_grad():
            logits = hf(torch.tensor(ref_ids[None, :-1])).logits[0]
        want = torch.nn.functional.cross_entropy(logits, ref_labels, ignore_index=-100).item()
        full = torch.nn.functional.cross_entropy(logits, torch.tensor(ref_ids[1:])).item()
        assert abs(got - want) <= 1e-5 * abs(want), (k, got, want)
        assert abs(full - want) > 1e-3  # the mask matters
        assert (labels == IGNORE_INDEX).sum() == (~ref_mask[1:]).sum()


def test_finetune_cli_on_chat_jsonl(folder, tmp_path, capsys):
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(json.dumps({"messages": m}) for m in CONVERSATIONS[:2]) + "\n\n")
    out = tmp_path / "adapter"
    rc = cli_main(["finetune", "--model", folder, "--data", str(data), "--out", str(out), "--rank", "4",
                   "--steps", "8", "--lr", "1e-2", "--block", "64", "--seed", "1"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["examples"] == 2 and summary["last_loss"] < summary["first_loss"] - 0.3, summary
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()


GOOD = json.dumps({"messages": CONVERSATIONS[0]})


@pytest.mark.parametrize("lines,line,match", [
    ([GOOD, '{"messages": [ {"role": "user"'], 2, "not JSON"),
    ([GOOD, GOOD, json.dumps({"messages": [{"content": "x"}, {"role": "assistant", "content": "y"}]})], 3,
     "message 0 has no 'role'"),
    ([json.dumps({"messages": [{"role": "user", "content": "only a question"}]})], 1, "no assistant message"),
    ([json.dumps({"messages": [{"role": "wizard", "content": "x"}]})], 1, "role 'wizard'"),
    ([json.dumps({"messages": [{"role": "assistant", "content": 3}]})], 1, "'content' must be a string"),
    ([json.dumps({"messages": []})], 1, "non-empty list"),
    ([json.dumps([1, 2])], 1, "an object with a 'messages' list"),
    (["[" * 100000], 1, "not JSON"),
    ([], None, "empty"),
    (["", "   "], None, "empty"),
])
def test_hostile_jsonl_names_file_and_line(folder, tmp_path, capsys, lines, line, match):
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines))
    with pytest.raises(ChatDataError) as e:
        read_chat_jsonl(data)
    assert str(data) in str(e.value) and match in str(e.value)
    if line is not None:
        assert f"line {line}:" in str(e.value)
    rc = cli_main(["finetune", "--model", folder, "--data", str(data), "--out", str(tmp_path / "a"), "--steps", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and str(data) in err and match in err
    assert not (tmp_path / "a").exists()


def test_chat_data_limits_and_truncation(folder, tmp_path):
    _, tok = load_text_model(folder, activations="float32")
    bad = tmp_path / "bytes.jsonl"
    bad.write_bytes(GOOD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(ChatDataError, match=r"line 2: not UTF-8"):
        read_chat_jsonl(bad)
    big = tmp_path / "big.jsonl"
    big.write_text(GOOD + "\n" + GOOD)
    with pytest.raises(LimitError, match=r"big.jsonl line 1: the line's length is 21\+ bytes, over the limit of 20"):
        read_chat_jsonl(big, max_line_bytes=20)
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"messages": [{"role": "user", "content": "word " * 200},
                                             {"role": "assistant", "content": "ok"}]}))
    with pytest.raises(ChatDataError, match=r"long.jsonl line 1: no assistant token within the first 16 tokens"):
        chat_examples(long, tok, 16)
    ex = chat_examples(long, tok, 4096)
    assert len(ex[0][0]) > 200 and (ex[0][1] != IGNORE_INDEX).sum() >= 2
    # a template that rewrites earlier turns cannot be masked prefix-wise
    def rewriting(msgs, add_generation_prompt):
        return "|".join(m["content"][::-1] if i < len(msgs) - 1 else m["content"] for i, m in enumerate(msgs))
    with pytest.raises(ChatDataError, match="turn by turn"):
        ChatExamples([CONVERSATIONS[1]], rewriting, lambda t: tok.encode(t, bos=False, special=True), 64)
