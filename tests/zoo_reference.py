"""A random-weight transformers model saved as a Hugging Face folder: the reference the zoo's parity tests
load with ember.models.auto.from_pretrained (offline, seconds)."""
from __future__ import annotations


def saved_reference(make, folder):
    """(make() in eval mode, folder): a transformers model with fresh weights drawn under seed 0, saved there
    as safetensors."""
    import torch
    torch.manual_seed(0)
    ref = make().eval()
    ref.save_pretrained(folder, safe_serialization=True)
    return ref, folder


def causal_lm(config):
    """A transformers causal LM for config, attending by the plain softmax (tight logits)."""
    import transformers
    config._attn_implementation = "eager"
    return transformers.AutoModelForCausalLM.from_config(config)


def saved_fixture(configs):
    """A module-scoped pytest fixture `saved`: kind -> (transformers causal LM of configs[kind](), the folder it was
    saved to), built once per kind."""
    import pytest

    @pytest.fixture(scope="module")
    def saved(tmp_path_factory):
        out = {}

        def get(kind):
            if kind not in out:
                out[kind] = saved_reference(lambda: causal_lm(configs[kind]()), tmp_path_factory.mktemp(kind))
            return out[kind]
        return get
    return saved


def random_ids(n, vocab, seed=0, rows=1):
    """(rows, n) token ids in 1 .. vocab - 1 (0 is the pad id), drawn under seed."""
    import numpy as np
    return np.random.default_rng(seed).integers(1, vocab, (rows, n))


def check_logits(model, ref, ids, split=9):
    """ember's logits for ids equal transformers' within 1e-4 relative, whole and through the KV cache in two
    steps (ids[:, :split], then the rest); returns (first, rest) of the cached steps."""
    import numpy as np
    import torch

    import ember
    with torch.no_grad():
        want = ref(torch.tensor(ids)).logits.numpy()
    got = model(input_ids=ids).logits.numpy()                              # (rows, n, vocab), as transformers' call
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # the output is also the logits tensor itself (earlier callers), and a cache continues as past_key_values
    first = model(ember.tensor(ids[:, :split]), use_cache=True)
    rest = model(ids[:, split:], past_key_values=first.past_key_values)
    got = np.concatenate([first.numpy(), rest.numpy()], 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    return first, rest


def reference_greedy(ref, prompt, n):
    """transformers' n greedy new tokens after prompt (a list of ids), exactly n (pad id 0)."""
    import torch
    with torch.no_grad():
        return ref.generate(torch.tensor([list(prompt)]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                            pad_token_id=0)[0, len(prompt):].tolist()
