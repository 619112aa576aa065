"""Mixtral (after transformers' models/mixtral/modeling_mixtral.py, v5.x): the llama layout (models/common/layout.py)
with every block's MLP a sparse mixture of experts (models/common/moe.py): a softmax router picks
num_experts_per_tok of num_local_experts SwiGLU experts per token, their weights renormalised to sum 1.
Hub checkpoints name the block `block_sparse_moe` and each expert's matrices w1 (gate), w3 (up), w2 (down)."""
from __future__ import annotations

from ..common.layout import LlamaLayout, build
from ..common.moe import moe_block, stack_experts


class Mixtral(LlamaLayout):
    def mlp(self, s):
        c = self.hf_config
        return moe_block(s, num_experts=c.get("num_local_experts", 8), top_k=c.get("num_experts_per_tok", 2),
                         hidden=s.hidden_dim, norm_topk_prob=True, where=s.where)


def build_from_hf(config: dict, sd: dict, where: str) -> Mixtral:
    sd = stack_experts(sd, where, block="block_sparse_moe", names=("w1", "w3", "w2"))
    return build(Mixtral, config, sd, where)
