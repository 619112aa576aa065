"""CTranslate2 ``model.bin`` reader (pure numpy) and Whisper -> Hugging Face name conversion.

Format (ctranslate2 4.x ``specs/model_spec.py::_serialize``, binary version 6), little-endian,
no padding:
    u32 version | str spec | u32 revision | u32 n_vars
    per variable: str name | u8 rank | u32 dims[rank] | u8 dtype | u32 nbytes | raw bytes
    u32 n_aliases | per alias: str alias | str target
A str is a u16 length that counts a trailing NUL, then the bytes (NUL included).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np

from ember import dtypes
from ember.io import save
from ember.io.formats import Stored
from ...errors import FormatError

SUPPORTED_VERSION = 6
# CTranslate2 DataType ids (include/ctranslate2/types.h). bfloat16 has no numpy type: it is kept
# as its uint16 bit patterns, the storage ember uses for bfloat16.
CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: np.uint16}


class CT2FormatError(FormatError):
    """A CTranslate2 model.bin that is malformed, truncated or of an unsupported version."""


class CT2Model:
    """The contents of one model.bin: spec name, revision, and variables by name.

    ``variables`` maps every name, aliases included, to a numpy array; an alias maps to the very
    same array as its target (CTranslate2 stores tied weights once).
    """

    def __init__(self, source: str, spec: str, revision: int, variables: dict, aliases: dict):
        self.source, self.spec, self.revision = source, spec, revision
        self.variables, self.aliases = variables, aliases

    def __repr__(self):
        return (f"CT2Model(spec={self.spec!r}, revision={self.revision}, "
                f"{len(self.variables) - len(self.aliases)} variables, {len(self.aliases)} aliases)")


class _Cursor:
    """Reads little-endian fields off a buffer; every overrun is a CT2FormatError naming the file."""

    def __init__(self, data: memoryview, name: str):
        self.data, self.name, self.pos = data, name, 0

    def fail(self, msg: str):
        raise CT2FormatError(f"ember: {self.name}: {msg} (at byte {self.pos} of {len(self.data)})")

    def take(self, n: int, what: str) -> memoryview:
        if self.pos + n > len(self.data):
            self.fail(f"truncated while reading {what}: need {n} bytes, "
                      f"{len(self.data) - self.pos} left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self, what): return self.take(1, what)[0]
    def u16(self, what): return struct.unpack("<H", self.take(2, what))[0]
    def u32(self, what): return struct.unpack("<I", self.take(4, what))[0]

    def string(self, what) -> str:
        n = self.u16(f"{what} length")
        raw = bytes(self.take(n, what))
        if n == 0 or raw[-1] != 0:
            self.fail(f"{what} is not NUL-terminated")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"{what} is not valid UTF-8: {raw[:40]!r}")


def read_ct2(source: str | os.PathLike | bytes | bytearray | memoryview) -> CT2Model:
    """Parse a CTranslate2 model.bin (a path, or its bytes as fetched in a browser).

    Arrays are read-only views into the file's bytes (no copy); bfloat16 comes back as uint16 bits.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = memoryview(source).cast("B"), "<model.bin bytes>"
    else:
        name = str(source)
        data = memoryview(Path(source).read_bytes())
    cur = _Cursor(data, name)
    version = cur.u32("version")
    if version != SUPPORTED_VERSION:
        cur.fail(f"CTranslate2 binary version {version} is not supported (only "
                 f"{SUPPORTED_VERSION}, written by ctranslate2 >= 3); is this a model.bin at all?")
    spec = cur.string("spec name")
    revision = cur.u32("spec revision")
    n_vars = cur.u32("variable count")
    variables: dict[str, np.ndarray] = {}
    for i in range(n_vars):
        vname = cur.string(f"name of variable {i}")
        rank = cur.u8(f"rank of {vname!r}")
        shape = tuple(cur.u32(f"dim {d} of {vname!r}") for d in range(rank))
        type_id = cur.u8(f"dtype of {vname!r}")
        if type_id not in CT2_DTYPES:
            cur.fail(f"variable {vname!r} has unknown dtype id {type_id} "
                     f"(known: {sorted(CT2_DTYPES)})")
        dtype = np.dtype(CT2_DTYPES[type_id]).newbyteorder("<")
        nbytes = cur.u32(f"byte count of {vname!r}")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes != expected:
            cur.fail(f"variable {vname!r} shape {shape} dtype {dtype.name} needs {expected} bytes, "
                     f"header says {nbytes}")
        if vname in variables:
            cur.fail(f"variable {vname!r} appears twice")
        raw = cur.take(nbytes, f"data of {vname!r} {shape} {dtype.name}")
        variables[vname] = np.frombuffer(raw, dtype=dtype).reshape(shape)
    n_aliases = cur.u32("alias count")
    aliases: dict[str, str] = {}
    for i in range(n_aliases):
        alias = cur.string(f"alias {i}")
        aliases[alias] = cur.string(f"target of alias {alias!r}")
    if cur.pos != len(data):
        cur.fail(f"{len(data) - cur.pos} unexpected trailing bytes after the alias table")
    for alias, target in aliases.items():
        seen = {alias}
        while target in aliases:  # an alias of an alias: follow it, refusing cycles
            if target in seen:
                cur.fail(f"alias cycle through {sorted(seen)}")
            seen.add(target)
            target = aliases[target]
        if target not in variables:
            cur.fail(f"alias {alias!r} points at missing variable {target!r}")
        if alias in variables:
            cur.fail(f"alias {alias!r} shadows a stored variable of the same name")
    for alias in aliases:
        target = aliases[alias]
        while target in aliases:
            target = aliases[target]
        variables[alias] = variables[target]
    return CT2Model(name, spec, revision, variables, aliases)


# ---------------------------------------------------------------------------------------------
# CTranslate2 WhisperSpec -> Hugging Face WhisperForConditionalGeneration names
# ---------------------------------------------------------------------------------------------

# Flags CTranslate2 stores as scalars; the HF Whisper architecture is exactly these values
# (GELU is id 3 in ctranslate2's Activation enum). A file with other values is another model.
_WHISPER_FLAGS = {"decoder/activation": 3, "decoder/alibi": 0, "decoder/pre_norm": 1,
                  "decoder/scale_embeddings": 0, "decoder/start_from_zero_embedding": 0}
# Legacy single-head alignment settings (generation uses alignment_heads from config.json), and
# ALiBi options that only matter when decoder/alibi is on, which _WHISPER_FLAGS refuses.
_IGNORED = ("decoder/alignment_heads", "decoder/alignment_layer",
            "decoder/alibi_use_positive_positions", "decoder/scale_alibi")


class _Names:
    """Pops CT2 variables by name into an HF-named dict; what is never popped is an error."""

    def __init__(self, model: CT2Model):
        self.model = model
        self.left = {k: v for k, v in model.variables.items() if k not in model.aliases}
        self.out: dict[str, np.ndarray] = {}

    def take(self, name: str) -> np.ndarray:
        if name not in self.left:
            raise CT2FormatError(f"ember: {self.model.source}: Whisper variable {name!r} is missing")
        return self.left.pop(name)

    def copy(self, ct2: str, hf: str):
        self.out[hf] = self.take(ct2)

    def linear(self, ct2: str, hf: str):
        self.copy(f"{ct2}/weight", f"{hf}.weight")  # (out_features, in_features) in both
        self.copy(f"{ct2}/bias", f"{hf}.bias")

    def layer_norm(self, ct2: str, hf: str):
        self.copy(f"{ct2}/gamma", f"{hf}.weight")
        self.copy(f"{ct2}/beta", f"{hf}.bias")

    def fused(self, ct2: str, hf_projs: list[str]):
        """Split a linear whose output rows are several projections stacked (q|k|v or k|v)."""
        w, b = self.take(f"{ct2}/weight"), self.take(f"{ct2}/bias")  # (n * d, d), (n * d,)
        n = len(hf_projs)
        if w.shape[0] % n or b.shape != (w.shape[0],):
            raise CT2FormatError(f"ember: {self.model.source}: {ct2} weight {w.shape} / bias "
                                 f"{b.shape} cannot be split into {n} projections")
        for hf, w_part, b_part in zip(hf_projs, np.split(w, n), np.split(b, n)):
            self.out[f"{hf}.weight"] = w_part
            if hf.endswith("k_proj"):
                # HF Whisper's k_proj has no bias; CTranslate2 fills its slot with zeros. A
                # nonzero slot would be silently dropped, so refuse it.
                if np.any(b_part != 0):
                    raise CT2FormatError(f"ember: {self.model.source}: {ct2}/bias has a nonzero "
                                         f"key-bias slot; HF Whisper's {hf} has no bias")
            else:
                self.out[f"{hf}.bias"] = b_part


def _layer_indices(model: CT2Model, stack: str) -> int:
    found = {int(m.group(1)) for k in model.variables
             if (m := re.match(rf"{stack}/layer_(\d+)/", k))}
    if found != set(range(len(found))) or not found:
        raise CT2FormatError(f"ember: {model.source}: {stack} layers {sorted(found)} are not "
                             f"numbered 0..n-1")
    return len(found)


_TORCH_DTYPE_NAMES = {"float16": "float16", "float32": "float32", "uint16": "bfloat16"}


def whisper_state_dict(model: CT2Model) -> tuple[dict[str, np.ndarray], dict]:
    """CT2 WhisperSpec variables -> (HF state dict, config.json fields read off the weights).

    Dtypes are kept as stored (float16 for the released Whisper conversions). A projection that
    is an alias of the token embedding (the usual case) becomes ``tie_word_embeddings`` and no
    ``proj_out.weight`` entry, the way Hugging Face saves tied weights.
    """
    if model.spec != "WhisperSpec":
        raise CT2FormatError(f"ember: {model.source}: spec is {model.spec!r}, not 'WhisperSpec'")
    scaled = [k for k in model.variables if k.endswith("weight_scale")]
    if scaled:
        raise CT2FormatError(f"ember: {model.source}: quantized CTranslate2 weights ({scaled[0]}, "
                             f"...) are not supported; convert with quantization float16 or float32")
    n = _Names(model)
    for flag, want in _WHISPER_FLAGS.items():
        if flag in n.left and int(n.left.pop(flag)) != want:
            raise CT2FormatError(f"ember: {model.source}: {flag} = {int(model.variables[flag])}, "
                                 f"HF Whisper needs {want}")
    for name in _IGNORED:
        n.left.pop(name, None)
    heads = {s: int(n.take(f"{s}/num_heads")) for s in ("encoder", "decoder")}

    for stack in ("encoder", "decoder"):  # the same layer layout, plus cross-attention in the decoder
        for i in range(_layer_indices(model, stack)):
            src, dst = f"{stack}/layer_{i}", f"model.{stack}.layers.{i}"
            n.layer_norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
            n.fused(f"{src}/self_attention/linear_0", [f"{dst}.self_attn.{p}_proj" for p in "qkv"])
            n.linear(f"{src}/self_attention/linear_1", f"{dst}.self_attn.out_proj")
            if stack == "decoder":
                n.layer_norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
                n.linear(f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj")
                n.fused(f"{src}/attention/linear_1", [f"{dst}.encoder_attn.{p}_proj" for p in "kv"])
                n.linear(f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj")
            n.layer_norm(f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm")
            n.linear(f"{src}/ffn/linear_0", f"{dst}.fc1")
            n.linear(f"{src}/ffn/linear_1", f"{dst}.fc2")
    for conv in ("conv1", "conv2"):  # (d_model, in_channels, 3) in both
        n.linear(f"encoder/{conv}", f"model.encoder.{conv}")
    for stack in ("encoder", "decoder"):
        n.copy(f"{stack}/position_encodings/encodings", f"model.{stack}.embed_positions.weight")
        n.layer_norm(f"{stack}/layer_norm", f"model.{stack}.layer_norm")
    n.copy("decoder/embeddings/weight", "model.decoder.embed_tokens.weight")
    tied = model.aliases.get("decoder/projection/weight") == "decoder/embeddings/weight"
    if not tied:
        n.copy("decoder/projection/weight", "proj_out.weight")
    if n.left:
        raise CT2FormatError(f"ember: {model.source}: unexpected Whisper variables "
                             f"{sorted(n.left)[:8]} ({len(n.left)} in all)")

    sd = n.out
    d_model = sd["model.encoder.conv1.weight"].shape[0]
    for stack, h in heads.items():
        if d_model % h:
            raise CT2FormatError(f"ember: {model.source}: d_model {d_model} is not divisible by "
                                 f"{stack} num_heads {h}")
    dims = {
        "num_mel_bins": sd["model.encoder.conv1.weight"].shape[1],
        "d_model": d_model,
        "vocab_size": sd["model.decoder.embed_tokens.weight"].shape[0],
        "encoder_layers": _layer_indices(model, "encoder"),
        "decoder_layers": _layer_indices(model, "decoder"),
        "encoder_attention_heads": heads["encoder"],
        "decoder_attention_heads": heads["decoder"],
        "encoder_ffn_dim": sd["model.encoder.layers.0.fc1.weight"].shape[0],
        "decoder_ffn_dim": sd["model.decoder.layers.0.fc1.weight"].shape[0],
        "max_source_positions": sd["model.encoder.embed_positions.weight"].shape[0],
        "max_target_positions": sd["model.decoder.embed_positions.weight"].shape[0],
        "tie_word_embeddings": tied,
        "torch_dtype": _TORCH_DTYPE_NAMES[sd["model.decoder.embed_tokens.weight"].dtype.name],
    }
    return sd, dims


# ---------------------------------------------------------------------------------------------
# A converted folder: config.json, generation_config.json, model.safetensors, tokenizer.json
# ---------------------------------------------------------------------------------------------

def _special_tokens(tokenizer_path: Path) -> dict[str, int]:
    try:
        added = json.loads(tokenizer_path.read_text(encoding="utf-8"))["added_tokens"]
        ids = {t["content"]: int(t["id"]) for t in added}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CT2FormatError(f"ember: {tokenizer_path}: cannot read added_tokens ({e})") from e
    need = ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>", "<|startofprev|>",
            "<|translate|>", "<|transcribe|>")
    missing = [t for t in need if t not in ids]
    if missing:
        raise CT2FormatError(f"ember: {tokenizer_path}: Whisper special tokens {missing} missing")
    return ids


def whisper_configs(dims: dict, ct2_config: dict, special: dict[str, int]) -> tuple[dict, dict]:
    """(config.json, generation_config.json) for HF Whisper from the CT2 dims, CT2 config.json
    (suppress ids, alignment heads, language ids) and the tokenizer's special token ids."""
    eot, sot = special["<|endoftext|>"], special["<|startoftranscript|>"]
    # ctranslate2 writes null for lists the source model did not have
    suppress = list(ct2_config.get("suppress_ids") or [])
    suppress_begin = list(ct2_config.get("suppress_ids_begin") or [])
    config = {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        **dims,
        "activation_function": "gelu",
        "scale_embedding": False,
        # As in openai/whisper-*: HF's config uses <|startoftranscript|> as bos.
        "bos_token_id": sot, "decoder_start_token_id": sot,
        "eos_token_id": eot, "pad_token_id": eot,
        # suppress_tokens live in generation_config.json only: transformers warns when both set.
        "use_cache": True,
    }
    # openai/whisper's rule: English-only checkpoints have a 51864-token vocabulary.
    multilingual = dims["vocab_size"] >= 51865
    generation = {
        "decoder_start_token_id": sot, "bos_token_id": sot,
        "eos_token_id": eot, "pad_token_id": eot,
        "suppress_tokens": suppress, "begin_suppress_tokens": suppress_begin,
        "no_timestamps_token_id": special["<|notimestamps|>"],
        "prev_sot_token_id": special["<|startofprev|>"],
        "max_initial_timestamp_index": 50,  # openai's max_initial_timestamp = 1.0 s / 0.02 s
        "max_length": dims["max_target_positions"],
        "is_multilingual": multilingual,
        "return_timestamps": False,
    }
    if ct2_config.get("alignment_heads"):
        generation["alignment_heads"] = [list(h) for h in ct2_config["alignment_heads"]]
    if multilingual:
        by_id = {i: t for t, i in special.items()}
        generation["lang_to_id"] = {by_id[i]: i for i in ct2_config.get("lang_ids") or []
                                  if i in by_id}
        generation["task_to_id"] = {"transcribe": special["<|transcribe|>"],
                                    "translate": special["<|translate|>"]}
    return config, generation


def convert_ct2_whisper(ct2_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Convert a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json) into a Hugging
    Face folder: config.json, generation_config.json, model.safetensors (HF names, dtype as stored:
    float16 for tiny.en; tied proj_out omitted) and tokenizer.json (copied). Returns out_dir."""
    ct2_dir, out_dir = Path(ct2_dir), Path(out_dir)
    for f in ("model.bin", "config.json", "tokenizer.json"):
        if not (ct2_dir / f).is_file():
            raise FileNotFoundError(f"ember: {ct2_dir / f} not found; a CTranslate2 Whisper folder "
                                    f"needs model.bin, config.json and tokenizer.json")
    try:
        ct2_config = json.loads((ct2_dir / "config.json").read_text(encoding="utf-8"))
    except ValueError as e:
        raise CT2FormatError(f"ember: {ct2_dir / 'config.json'}: not valid JSON ({e})") from e
    if not isinstance(ct2_config, dict):
        raise CT2FormatError(f"ember: {ct2_dir / 'config.json'}: expected a JSON object")
    state, dims = whisper_state_dict(read_ct2(ct2_dir / "model.bin"))
    config, generation = whisper_configs(dims, ct2_config, _special_tokens(ct2_dir / "tokenizer.json"))
    out_dir.mkdir(parents=True, exist_ok=True)
    # numpy has no bfloat16: such weights are uint16 bits, which ember.io wants labelled
    state = {k: Stored(v, dtypes.bfloat16) if v.dtype == np.uint16 else v for k, v in state.items()}
    save(state, out_dir / "model.safetensors", metadata={"format": "pt"})  # transformers needs "pt"
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2))
    shutil.copyfile(ct2_dir / "tokenizer.json", out_dir / "tokenizer.json")
    return out_dir
