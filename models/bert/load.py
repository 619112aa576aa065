"""BERT / RoBERTa / DistilBERT from a Hugging Face state dict (ember.models.auto's entry): a task model's
checkpoint (BertForMaskedLM ...) keeps the encoder under `bert.` / `roberta.` / `distilbert.`; that prefix is
taken off and the task head's tensors (named in HEADS) are left out; everything else loads strictly."""
from __future__ import annotations

from .config import BertConfig
from .distilbert import DistilBertModel
from .model import BertModel

# tensors of task heads ember's encoders do not have (the encoder loads without them)
HEADS = ("cls.", "lm_head.", "classifier.", "qa_outputs.", "pre_classifier.", "vocab_transform.",
         "vocab_layer_norm.", "vocab_projector.")
# buffers older checkpoints saved beside the weights: the position/token-type index tables
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def build_from_hf(config: dict, sd: dict, where: str):
    prefix = {"roberta": "roberta.", "distilbert": "distilbert."}.get(config.get("model_type"), "bert.")
    if any(k.startswith(prefix) for k in sd):
        sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix) or not k.startswith(HEADS)}
    sd = {k: v for k, v in sd.items() if k not in BUFFERS}
    c = BertConfig.from_hf(config, pooler="pooler.dense.weight" in sd)
    model = DistilBertModel(c) if c.model_type == "distilbert" else BertModel(c)
    model.load_state_dict(sd, strict=True, source=where)
    return model
