"""Data recipe for the demo model: a corpus regenerated on the machine from CPython's own help texts
(`pydoc_data/topics.py`, the reference-manual topics that `help()` shows; PSF licence, shipped with every
CPython), and a byte-level BPE tokenizer trained on it.

    python -m ember.models.llama.corpus OUT_DIR [--vocab 2048]    # writes corpus.txt and tokenizer.json

Training the tokenizer uses the `tokenizers` package's BPE trainer (a build-time tool like torch in the
tests; ember itself only reads the resulting tokenizer.json, in pure Python if need be).
"""
from __future__ import annotations

import argparse
import os
import re

BOS, EOS = "<s>", "</s>"


def build_corpus() -> str:
    """The help topics in a fixed order, separated by blank lines, runs of blank lines squeezed."""
    from pydoc_data.topics import topics
    docs = [re.sub(r"\n{3,}", "\n\n", topics[k].strip()) for k in sorted(topics)]
    return "\n\n".join(docs) + "\n"


def train_tokenizer(text: str, vocab_size: int = 2048) -> str:
    """A byte-level BPE tokenizer.json (GPT-2 style: every byte representable, no unknown token) with
    <s> and </s> as special tokens 0 and 1."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        raise ImportError("ember: training the demo tokenizer needs the `tokenizers` package (pip install "
                          "tokenizers); loading the shipped tokenizer.json does not") from None
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    return tok.to_str()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--vocab", type=int, default=2048)
    a = ap.parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    text = build_corpus()
    with open(os.path.join(a.out_dir, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(train_tokenizer(text, a.vocab))
    print(f"corpus {len(text)} chars, tokenizer vocab {a.vocab} -> {a.out_dir}")


if __name__ == "__main__":
    main()
