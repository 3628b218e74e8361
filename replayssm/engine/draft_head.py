"""The LM head a device drafter picks its draft tokens with: the model's own, or an fp8 copy of it.

Drafting reads the whole LM head once per draft token (T-1 times a step): on Qwen3.5-27B that is 2.5 GB of
bf16 weights per draft, three quarters of what the MTP drafter streams. Drafts are only proposals -- the
verify decides what is emitted, so the output stays exact whatever the drafter proposes -- so the drafter
may pick them from a cheaper head: ``FP8Head`` keeps the LM head in float8 (e4m3) with one scale per vocab
row and multiplies with ``torch._scaled_mm`` (Hopper/Ada tensor cores), half the bytes. Its argmax can
differ from the bf16 head's only on near ties, which costs at most a little acceptance
(``tests/gpu/test_mtp.py`` measures both on the embedded model).

``draft_head(lm_head, kind)``: ``"model"`` (the model's head), ``"fp8"``, or ``"auto"`` (fp8 on a GPU with fp8
tensor cores, compute capability >= 8.9; else the model's head). On the CPU, "fp8" runs its fp32 reference.
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0  # largest finite float8_e4m3fn


class ModelHead:
    """Draft tokens from the model's own LM head: ``argmax(h @ W^T)``."""

    kind = "model"
    extra_bytes = 0

    def __init__(self, lm_head: torch.nn.Linear):
        self.lm_head = lm_head

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(h).argmax(-1)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float8_e4m3fn rows of ``x`` [N, D] and their fp32 scales [N] (row max -> 448)."""
    scale = x.float().abs().amax(1).clamp_min(1e-12) / FP8_MAX
    return (x.float() / scale[:, None]).to(torch.float8_e4m3fn), scale


class FP8Head:
    """Draft tokens from an fp8 copy of the LM head (per-row scales) and fp8 hidden rows (per-row scales):
    ``argmax(scaled_mm(h8, W8^T))``; on the CPU the same quantised numbers are multiplied in fp32 (the
    reference of the GPU path; its rounding differs only in the accumulation)."""

    kind = "fp8"

    def __init__(self, lm_head: torch.nn.Linear):
        w = lm_head.weight.detach()
        self.N, self.D = w.shape
        if w.device.type == "cuda":  # tensor-core tiles: vocab and hidden padded to multiples of 16 (zeros)
            w = _pad(_pad(w, 0), 1)
        self.w8, scale = quantize_rows(w)  # [N, D]
        self.w_scale = scale[None, :].contiguous()  # [1, N]
        self.out_dtype = w.dtype if w.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        self.extra_bytes = self.w8.numel() + self.w_scale.numel() * 4

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        B = h.shape[0]
        if h.device.type != "cuda":
            h8, sh = quantize_rows(h)
            return ((h8.float() * sh[:, None]) @ (self.w8.float() * self.w_scale.T).T).argmax(-1)
        h8, sh = quantize_rows(_pad(_pad(h, 0), 1))
        logits = torch._scaled_mm(h8, self.w8.T, scale_a=sh[:, None].contiguous(), scale_b=self.w_scale,
                                  out_dtype=self.out_dtype)  # fmt: skip
        return logits[:B, : self.N].argmax(-1)  # padded vocab rows never win


def _pad(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` (2-d) padded with zeros along ``dim`` to a multiple of 16."""
    n = -x.shape[dim] % 16
    return torch.nn.functional.pad(x, (0, n) if dim == 1 else (0, 0, 0, n)) if n else x.contiguous()


def fp8_supported(lm_head: torch.nn.Linear) -> bool:
    """An fp8 head can run here: a CUDA GPU of compute capability >= 8.9 (fp8 tensor cores)."""
    w = lm_head.weight
    return w.device.type == "cuda" and torch.cuda.get_device_capability(w.device) >= (8, 9)


def draft_head(lm_head: torch.nn.Linear, kind: str = "auto") -> ModelHead | FP8Head:
    """The drafter's head of ``kind`` ("auto", "model" or "fp8"); "fp8" where it cannot run is an error."""
    if kind not in ("auto", "model", "fp8"):
        raise ValueError(f"draft_head must be 'auto', 'model' or 'fp8', got {kind!r}")
    if kind == "model" or (kind == "auto" and not fp8_supported(lm_head)):
        return ModelHead(lm_head)
    if lm_head.weight.device.type == "cuda" and not fp8_supported(lm_head):
        raise ValueError("draft_head='fp8' needs a GPU of compute capability >= 8.9 (fp8 tensor cores)")
    return FP8Head(lm_head)
