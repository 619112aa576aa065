"""BertConfig: BERT / RoBERTa / DistilBERT dimensions from a Hugging Face config.json (their field names
differ: DistilBERT says dim / n_layers / hidden_dim), checked against the resource budget."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ...limits import check_config
from ..common.config_check import check_fields


class BertConfigError(FormatError):
    """A config.json that cannot describe a BERT-family encoder (names the field)."""


@dataclass
class BertConfig:
    vocab_size: int = 30522
    dim: int = 768
    hidden_dim: int = 3072
    n_layers: int = 12
    n_heads: int = 12
    max_positions: int = 512
    type_vocab_size: int = 2
    norm_eps: float = 1e-12
    act: str = "gelu"
    pad_token_id: int = 0
    roberta: bool = False          # positions count from pad_token_id + 1 over real tokens
    pooler: bool = True            # has pooler.dense (BertModel; not DistilBERT)
    model_type: str = "bert"

    def __post_init__(self):
        where = f"{self.model_type} config.json"
        for name in ("vocab_size", "dim", "hidden_dim", "n_layers", "n_heads", "max_positions"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise BertConfigError(f"ember: {where} field {name!r} must be a positive int, got {v!r}")
        check_config(where, "vocab", vocab_size=self.vocab_size)
        check_config(where, "width", dim=self.dim, hidden_dim=self.hidden_dim, n_heads=self.n_heads)
        check_config(where, "layers", n_layers=self.n_layers)
        check_config(where, "context", max_positions=self.max_positions)
        if self.dim % self.n_heads:
            raise BertConfigError(f"ember: {where}: hidden size {self.dim} is not a multiple of {self.n_heads} heads")

    @classmethod
    def from_hf(cls, d: dict, pooler: bool = True) -> BertConfig:
        mt = d.get("model_type", "bert")
        check_fields(d, f"{mt} config.json", BertConfigError)
        try:
            if mt == "distilbert":
                return cls(vocab_size=d["vocab_size"], dim=d["dim"], hidden_dim=d["hidden_dim"],
                           n_layers=d["n_layers"], n_heads=d["n_heads"],
                           max_positions=d.get("max_position_embeddings", 512), type_vocab_size=0, norm_eps=1e-12,
                           act=d.get("activation", "gelu"), pad_token_id=d.get("pad_token_id", 0), pooler=False,
                           model_type=mt)
            if d.get("position_embedding_type", "absolute") != "absolute":
                raise BertConfigError(f"ember: {mt} config.json position_embedding_type "
                                      f"{d['position_embedding_type']!r} is not supported (absolute)")
            return cls(vocab_size=d["vocab_size"], dim=d["hidden_size"], hidden_dim=d["intermediate_size"],
                       n_layers=d["num_hidden_layers"], n_heads=d["num_attention_heads"],
                       max_positions=d.get("max_position_embeddings", 512),
                       type_vocab_size=d.get("type_vocab_size", 2), norm_eps=d.get("layer_norm_eps", 1e-12),
                       act=d.get("hidden_act", "gelu"), pad_token_id=d.get("pad_token_id", 0) or 0,
                       roberta=mt in ("roberta", "xlm-roberta", "camembert"), pooler=pooler, model_type=mt)
        except KeyError as e:
            raise BertConfigError(f"ember: {mt} config.json lacks the field {e.args[0]!r}") from None
