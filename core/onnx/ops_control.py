"""ONNX control flow: If, Loop, Scan, with subgraphs run by the session (they see the outer scope)."""
from __future__ import annotations

from .registry import op
from .values import host


@op("If")
def _if(ctx, ins, at):
    branch = at.graph("then_branch") if bool(host(ins[0]).reshape(-1)[0]) else at.graph("else_branch")
    return ctx.run_graph(branch, {}, ctx.scope)
