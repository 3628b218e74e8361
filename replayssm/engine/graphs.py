"""Whole engine steps as CUDA graphs: the static buffers a step reads and writes, and their capture.

One captured step is model forward + acceptance + commit of the GDN state, the KV cache and the device
drafter. Its inputs are packed into one int64 buffer (slot, real draft count, prescribed accepted count, the
window's tokens) and one fp32 buffer (sampling uniforms, temperature) per row, each filled from a pinned host
copy with one non-blocking transfer; its output is one [B, T + 1] int64 buffer (accepted count, tokens) read
back with one transfer. Nothing else crosses between host and device during a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

INT_COLS = 3  # slot, num_drafts, prescribed num_accepted; then the T window tokens


@dataclass
class StepIO:
    """Static buffers of a step with ``B`` rows and window ``T`` (device + pinned host mirrors)."""

    ints: torch.Tensor  # [B, 3 + T] int64
    floats: torch.Tensor  # [B, 2T + 1] fp32: uniforms, temperature
    host_ints: torch.Tensor
    host_floats: torch.Tensor
    host_out: torch.Tensor  # [B, T + 1] int64

    @classmethod
    def allocate(cls, B: int, T: int, device: torch.device) -> StepIO:
        pin = device.type == "cuda"
        ints = torch.zeros(B, INT_COLS + T, dtype=torch.int64, device=device)
        floats = torch.ones(B, 2 * T + 1, dtype=torch.float32, device=device)
        return cls(ints, floats, torch.zeros(B, INT_COLS + T, dtype=torch.int64, pin_memory=pin),
                   torch.ones(B, 2 * T + 1, dtype=torch.float32, pin_memory=pin),
                   torch.zeros(B, T + 1, dtype=torch.int64, pin_memory=pin))  # fmt: skip

    def load(self, slots: list[int], tokens: torch.Tensor, num_drafts: list[int], prescribed: list[int] | None,
             uniforms: torch.Tensor | None, temperature: float) -> None:  # fmt: skip
        """Fill the first len(slots) rows (the rest are padding: slot -1) and send them to the device."""
        B = len(slots)
        hi, hf = self.host_ints, self.host_floats
        hi.zero_()
        hi[:, 0] = -1
        hi[:, 2] = 1
        hi[:B, 0] = torch.tensor(slots, dtype=torch.int64)
        hi[:B, 1] = torch.tensor(num_drafts, dtype=torch.int64)
        if prescribed is not None:
            hi[:B, 2] = torch.tensor(prescribed, dtype=torch.int64)
        hi[:B, INT_COLS:] = tokens
        self.ints.copy_(hi, non_blocking=True)
        if uniforms is not None:
            hf.fill_(1.0)
            T2 = uniforms.shape[1]
            hf[:B, :T2] = uniforms
            hf[:, T2] = temperature
            self.floats.copy_(hf, non_blocking=True)

    def fetch(self, out: torch.Tensor, B: int) -> torch.Tensor:
        """The first B rows of a step's output on the host (one transfer, then wait for it)."""
        if out.device.type != "cuda":
            return out[:B].clone()
        self.host_out.copy_(out, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        return self.host_out[:B].clone()


def capture(run, pool=None) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm ``run`` up twice on a side stream (compiles kernels; the buffers must hold padding rows only, so no
    state moves), then capture it. Returns the graph and its static output."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
        run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        out = run()
    return g, out
