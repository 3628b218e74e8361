"""A runner's captured steps and the memory of the weights they read (``ModelRunner.weights_moved``).

A CUDA graph reads the weights at the addresses they had when it was captured. ``.to()`` on a model gives every
parameter new memory whenever it converts (a round trip to another dtype or device and back included), and then
the captured steps would read the old memory: freed, reused, or still holding the old values. So a runner notes
where its model's first parameter lives, checks it before every step (``check_weights``: one address, nothing read
from the device) and captures its steps again when it has moved (``weights_moved``). ``LLM`` compares every
parameter's address (``engine/llm.py``), which also catches a module's weights replaced one by one."""

from __future__ import annotations

import torch

from .draft_head import draft_head


def weights_moved(runner) -> None:
    """Drop the runner's captured steps (each is captured again at its next use, in a new graph memory pool: PyTorch
    does not take a pool whose graphs are all gone), fuse the projections again and copy the MTP drafter's head again
    (``draft_head``: copies of the head's rows, not the live weights). Refused while a step is in flight."""
    if runner._in_flight is not None or runner.pending:
        raise RuntimeError("a step is in flight: commit, abort or finish it before the weights move")
    if runner.drafter is not None:
        runner.drafter.head = draft_head(runner.model.lm_head, runner.cfg.draft_head, runner.cfg.draft_vocab)
    runner._graphs.clear()
    runner._graph_pool = torch.cuda.graph_pool_handle() if runner.use_graphs else None
    runner.model.fuse_projections()
    runner._weights_at = next(runner.model.parameters()).data_ptr()


def check_weights(runner) -> None:
    """Before a step: the model's first parameter where the runner's steps were captured, else ``weights_moved``; in
    another dtype or on another device, refused (``RuntimeError``)."""
    p = next(runner.model.parameters())
    if p.data_ptr() == runner._weights_at:
        return
    if (p.dtype, p.device) != (runner.dtype, runner.device):
        raise RuntimeError(f"the model's weights are now {p.dtype} on {p.device}, but this runner was built for "
                           f"{runner.dtype} on {runner.device}: move them back, or build a new runner")  # fmt: skip
    weights_moved(runner)
