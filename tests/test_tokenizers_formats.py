"""llama2.c's tokenizer.bin (against SentencePiece itself) and Whisper's vocabulary.txt
(against the Whisper tokenizer.json read by the `tokenizers` package)."""
import random
import struct

import pytest

from ember.tokenizers import TokenizerError
from ember.tokenizers.llama2c import Llama2cTokenizer
from ember.tokenizers.whisper_vocab import WhisperVocabulary
from test_tokenizers import CORPUS, WHISPER, cached_wheel_file, llama_training_text

# run.c has no added-token matching, so literal "<unk>"/"<0x41>" text is left out
LLAMA_CORPUS = [t for t in CORPUS if "<" not in t]


def export_llama2c(sp) -> bytes:
    """llama2.c's tokenizer.py export: BOS/EOS renamed, '▁' spelled ' ', scores kept."""
    pieces, scores = [], []
    for i in range(sp.get_piece_size()):
        piece = {sp.bos_id(): "\n<s>\n", sp.eos_id(): "\n</s>\n"}.get(i, sp.id_to_piece(i))
        pieces.append(piece.replace("\u2581", " ").encode("utf-8"))
        scores.append(sp.get_score(i))
    out = [struct.pack("<i", max(len(p) for p in pieces))]
    for p, s in zip(pieces, scores):
        out.append(struct.pack("<fi", s, len(p)) + p)
    return b"".join(out)


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    spm = pytest.importorskip("sentencepiece")
    folder = tmp_path_factory.mktemp("spm")
    (folder / "corpus.txt").write_text("\n".join(llama_training_text()[:4000]), encoding="utf-8")
    spm.SentencePieceTrainer.train(  # Llama's settings, at toy size
        input=str(folder / "corpus.txt"), model_prefix=str(folder / "tok"), model_type="bpe",
        vocab_size=1000, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, split_digits=True,
        allow_whitespace_only_pieces=True, character_coverage=1.0, unk_id=0, bos_id=1,
        eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tok.model"))
    path = folder / "tokenizer.bin"
    path.write_bytes(export_llama2c(sp))
    return sp, path


def test_llama2c_encode_matches_sentencepiece(sentencepiece_model):
    sp, path = sentencepiece_model
    tok = Llama2cTokenizer.from_file(path)
    assert tok.get_vocab_size() == sp.get_piece_size()
    assert tok.pieces[3] == b"<0x00>" and tok.pieces[258] == b"<0xFF>"
    text = "\n".join(llama_training_text()[4000:4400])  # unseen lines, one long input
    for t in LLAMA_CORPUS + [text]:
        ids = tok.encode(t, bos=True)
        assert ids == sp.encode(t, add_bos=True), t
        assert tok.decode(ids) == sp.decode(ids), t
    assert tok.encode("hi", bos=False, eos=True)[-1] == 2
    assert tok.encode("", bos=True) == [1]


def test_llama2c_decode_stream_and_byte_pieces(sentencepiece_model):
    _, path = sentencepiece_model
    tok = Llama2cTokenizer.from_file(path)
    ids = tok.encode("naïve 日本 😀 ok")
    assert any(3 <= i < 259 for i in ids)  # CJK and emoji fall back to byte tokens
    stream = tok.decode_stream()
    pieces = [stream.step(i) for i in ids]
    assert "".join(p for p in pieces if p) == tok.decode(ids) == "naïve 日本 😀 ok"
    assert all(p is None or "\ufffd" not in p for p in pieces)
    with pytest.raises(TokenizerError, match=r"decode: id 5000 is out of range \(vocabulary size 1000\)"):
        tok.decode([1, 5000])


def test_llama2c_bad_files(tmp_path, sentencepiece_model):
    _, path = sentencepiece_model
    data = path.read_bytes()
    with pytest.raises(TokenizerError, match=r"^ember: .*x.bin: truncated at token 999"):
        Llama2cTokenizer.from_bytes(data[:-3], vocab_size=1000, source="x.bin")
    with pytest.raises(TokenizerError, match=r"holds 1000 tokens, expected 1200"):
        Llama2cTokenizer.from_bytes(data, vocab_size=1200)
    with pytest.raises(TokenizerError, match=r"too short for the header"):
        Llama2cTokenizer.from_bytes(b"\x01")
    small = struct.pack("<i", 4) + b"".join(struct.pack("<fi", 0.0, 1) + b"a" for _ in range(10))
    with pytest.raises(TokenizerError, match="needs at least 259"):
        Llama2cTokenizer.from_bytes(small)
    with pytest.raises(TokenizerError, match=r"lone surrogate '\\udc00'"):
        Llama2cTokenizer.from_bytes(data).encode("a\udc00")


@pytest.fixture(scope="module")
def whisper_files():
    tokenizers = pytest.importorskip("tokenizers")
    package, version, member = WHISPER
    vocab = cached_wheel_file(package, version, member.replace("tokenizer.json", "vocabulary.txt"))
    ref = tokenizers.Tokenizer.from_file(str(cached_wheel_file(*WHISPER)))
    return WhisperVocabulary.from_file(vocab), ref


def test_whisper_vocabulary_matches_tokenizer_json(whisper_files):
    vocab, ref = whisper_files
    n = ref.get_vocab_size()
    assert vocab.get_vocab_size() == 51864  # tiny.en: text, specials and 1501 timestamps
    assert [vocab.id_to_token(i) for i in range(n)] == [ref.id_to_token(i) for i in range(n)]
    assert vocab.tokens[n] == "<|0.00|>" and vocab.tokens[-1] == "<|30.00|>"
    assert vocab.token_to_id("<|endoftext|>") == ref.token_to_id("<|endoftext|>") == 50256
    rng = random.Random(1)
    for text in CORPUS:
        ids = ref.encode(text).ids
        assert vocab.decode(ids) == ref.decode(ids)
        assert vocab.decode(ids, skip_special_tokens=False) == ref.decode(ids, skip_special_tokens=False)
    for _ in range(200):  # random ids, including partial UTF-8 sequences
        ids = [rng.randrange(n) for _ in range(rng.randrange(1, 10))]
        assert vocab.decode(ids, skip_special_tokens=False) == ref.decode(ids, skip_special_tokens=False)
    assert vocab.decode([50363, 1318, 51863]) == ref.decode([1318])  # timestamps are special
    with pytest.raises(TokenizerError, match=r"id 51864 is out of range for .*vocabulary.txt"):
        vocab.decode([51864])


def test_gguf_stream_decoder_holds_partial_and_replaces_invalid_bytes():
    # byte-fallback tokens stream one byte at a time: a partial UTF-8 sequence is held back, an invalid byte
    # becomes U+FFFD at once and must not stall the text after it (it did: every later step returned None)
    from ember.tokenizers.gguf_spm import SpmTokenizer
    tokens = ["<unk>", "a"] + [f"<0x{b:02X}>" for b in range(256)]
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.scores": [0.0] * len(tokens), "tokenizer.ggml.token_type": [2, 1] + [6] * 256}
    tok = SpmTokenizer.from_gguf_metadata(md, "x.gguf")
    byte = lambda b: 2 + b  # noqa: E731
    ids = [byte(0xE2), byte(0x82), byte(0xAC), byte(0xFF), 1, byte(0xF0), byte(0x9F), 1, byte(0xC3), byte(0xA9)]
    stream = tok.decode_stream()
    out = [stream.step(i) for i in ids]
    assert out == [None, None, "€", "\ufffd", "a", None, None, "\ufffda", None, "é"]
    raw = b"".join(tok.piece(i) for i in ids)
    assert "".join(p for p in out if p) == raw.decode("utf-8", errors="replace") == tok.decode(ids)
