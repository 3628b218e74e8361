"""The LM head a device drafter picks its draft tokens with: the model's own, or an fp8 copy of it, over the
whole vocabulary or a smaller draft vocabulary.

Drafting reads the whole LM head once per draft token (T-1 times a step): on Qwen3.5-27B that is 2.5 GB of
bf16 weights per draft, three quarters of what the MTP drafter streams. Drafts are only proposals -- the
verify decides what is emitted, so the output stays exact whatever the drafter proposes -- so the drafter
may pick them from a cheaper head: ``FP8Head`` keeps the LM head in float8 (e4m3) with one scale per vocab
row and multiplies with ``torch._scaled_mm`` (Hopper/Ada tensor cores), half the bytes. Its argmax can
differ from the bf16 head's only on near ties, which costs at most a little acceptance
(``tests/gpu/test_mtp.py`` measures both on the embedded model).

A draft vocabulary (``vocab``) restricts the drafts to a subset of the tokens: the head keeps a copy of just
those rows and maps its argmax back to token ids, so each draft reads ``N / vocab_size`` of the head (on
Qwen3.5-27B, 32,768 of 248,320 rows: 168 MB in fp8 instead of 1.27 GB). A draft outside the subset can never be
proposed, which costs acceptance only where the true next token is rare; the output stays exact. ``vocab`` is
a sequence of distinct token ids (the tokens worth drafting, e.g. the most frequent ones of a corpus: the best
choice) or an int ``N``: the ``N`` lowest ids, which for byte-level BPE vocabularies (Qwen's) are the bytes and
the earliest merges, a rough frequency order.

``draft_head(lm_head, kind, vocab)``: ``"model"`` (the model's head), ``"fp8"``, or ``"auto"`` (fp8 on a GPU with fp8
tensor cores, compute capability >= 8.9; else the model's head). On the CPU, "fp8" runs its fp32 reference.
"""

from __future__ import annotations

import torch

from .checks import is_int

FP8_MAX = 448.0  # largest finite float8_e4m3fn


class ModelHead:
    """Draft tokens from the model's own LM head: ``argmax(h @ W^T)``; with ``ids`` (a draft vocabulary) from a
    copy of just those rows of it, the argmax mapped back to token ids."""

    kind = "model"

    def __init__(self, lm_head: torch.nn.Linear, ids: torch.Tensor | None = None):
        w, b = lm_head.weight.detach(), lm_head.bias
        self.lm_head = lm_head
        self.ids = None if ids is None else ids.to(w.device)  # on the device: the mapping runs inside CUDA graphs
        self.vocab = w.shape[0] if ids is None else ids.numel()
        self.w = None if ids is None else w[self.ids].contiguous()
        self.b = None if ids is None or b is None else b.detach()[self.ids].contiguous()
        self.extra_bytes = 0 if ids is None else self.w.numel() * self.w.element_size() + self.ids.numel() * 8

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if self.w is None:
            return self.lm_head(h).argmax(-1)
        return self.ids[torch.nn.functional.linear(h, self.w, self.b).argmax(-1)]


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float8_e4m3fn rows of ``x`` [N, D] and their fp32 scales [N] (row max -> 448)."""
    scale = x.float().abs().amax(1).clamp_min(1e-12) / FP8_MAX
    return (x.float() / scale[:, None]).to(torch.float8_e4m3fn), scale


class FP8Head:
    """Draft tokens from an fp8 copy of the LM head (per-row scales) and fp8 hidden rows (per-row scales):
    ``argmax(scaled_mm(h8, W8^T))``; on the CPU the same quantised numbers are multiplied in fp32 (the
    reference of the GPU path; its rounding differs only in the accumulation). With ``ids`` (a draft
    vocabulary) only those rows are kept, and the argmax is mapped back to token ids."""

    kind = "fp8"

    def __init__(self, lm_head: torch.nn.Linear, ids: torch.Tensor | None = None):
        w = lm_head.weight.detach()
        if ids is not None:
            ids = ids.to(w.device)
            w = w[ids]
        self.ids = ids
        self.N, self.D = w.shape
        self.vocab = self.N
        if w.device.type == "cuda":  # tensor-core tiles: vocab and hidden padded to multiples of 16 (zeros)
            w = _pad(_pad(w, 0), 1)
        self.w8, scale = quantize_rows(w)  # [N, D]
        self.w_scale = scale[None, :].contiguous()  # [1, N]
        self.out_dtype = w.dtype if w.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        self.extra_bytes = self.w8.numel() + self.w_scale.numel() * 4 + (0 if ids is None else ids.numel() * 8)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        B = h.shape[0]
        if h.device.type != "cuda":
            h8, sh = quantize_rows(h)
            idx = ((h8.float() * sh[:, None]) @ (self.w8.float() * self.w_scale.T).T).argmax(-1)
        else:
            h8, sh = quantize_rows(_pad(_pad(h, 0), 1))
            logits = torch._scaled_mm(h8, self.w8.T, scale_a=sh[:, None].contiguous(), scale_b=self.w_scale,
                                      out_dtype=self.out_dtype)  # fmt: skip
            idx = logits[:B, : self.N].argmax(-1)  # padded vocab rows never win
        return idx if self.ids is None else self.ids[idx]


def _pad(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` (2-d) padded with zeros along ``dim`` to a multiple of 16."""
    n = -x.shape[dim] % 16
    return torch.nn.functional.pad(x, (0, n) if dim == 1 else (0, 0, 0, n)) if n else x.contiguous()


def fp8_supported(lm_head: torch.nn.Linear) -> bool:
    """An fp8 head can run here: a CUDA GPU of compute capability >= 8.9 (fp8 tensor cores)."""
    w = lm_head.weight
    return w.device.type == "cuda" and torch.cuda.get_device_capability(w.device) >= (8, 9)


def draft_ids(vocab, vocab_size: int) -> torch.Tensor | None:
    """The draft vocabulary as a long tensor of token ids (CPU), or None for the whole vocabulary: ``vocab`` None,
    an int N >= 1 (the N lowest ids; N >= ``vocab_size`` is the whole vocabulary) or a sequence of distinct ids in
    [0, vocab_size)."""
    if vocab is None:
        return None
    if isinstance(vocab, (bool, str, bytes, float)):
        raise TypeError(f"draft_vocab must be None, an int or a sequence of token ids, got {vocab!r}")
    if is_int(vocab):
        if vocab < 1:
            raise ValueError(f"draft_vocab={vocab}: must be >= 1")
        return None if vocab >= vocab_size else torch.arange(vocab)
    try:
        ids = torch.as_tensor(list(vocab) if not isinstance(vocab, torch.Tensor) else vocab)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"draft_vocab must be None, an int or a sequence of token ids, got {vocab!r:.80}") from None
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError("draft_vocab as token ids must be a non-empty 1-d sequence of ints")
    ids = ids.long().cpu()
    if int(ids.min()) < 0:
        raise ValueError(f"draft_vocab holds negative token ids: min {int(ids.min())}")
    if int(ids.max()) >= vocab_size:
        raise ValueError(f"draft_vocab holds ids outside [0, {vocab_size}): min {int(ids.min())}, max {int(ids.max())}")
    if ids.unique().numel() != ids.numel():
        raise ValueError("draft_vocab holds repeated token ids")
    return ids


def draft_head(lm_head: torch.nn.Linear, kind: str = "auto", vocab=None) -> ModelHead | FP8Head:
    """The drafter's head of ``kind`` ("auto", "model" or "fp8") over the draft vocabulary ``vocab`` (``draft_ids``);
    "fp8" where it cannot run is an error."""
    if kind not in ("auto", "model", "fp8"):
        raise ValueError(f"draft_head must be 'auto', 'model' or 'fp8', got {kind!r}")
    ids = draft_ids(vocab, lm_head.weight.shape[0])
    if kind == "model" or (kind == "auto" and not fp8_supported(lm_head)):
        return ModelHead(lm_head, ids)
    if lm_head.weight.device.type == "cuda" and not fp8_supported(lm_head):
        raise ValueError("draft_head='fp8' needs a GPU of compute capability >= 8.9 (fp8 tensor cores)")
    return FP8Head(lm_head, ids)
