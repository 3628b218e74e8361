"""The checks ``LLM`` runs on its arguments before anything loads, moves or allocates (``engine.llm``): the model's
length limit, the memory its weights and pool need, the draft vocabulary, the device and dtype."""

from __future__ import annotations

import torch

from ..models.config import ModelConfig
from ..models.model import HybridLM
from .checks import is_int
from .runner import RunnerConfig


def _check_max_len(cfg: ModelConfig, max_len: int) -> None:
    """``max_len`` (KV positions per request, allocated up front) within the model's max_position_embeddings."""
    limit = cfg.max_position_embeddings
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len}: must be at most the model's max_position_embeddings={limit}")


def _check_pool_fits(
    cfg: ModelConfig,
    backend: str,
    shadow: str | None,
    window: int,
    ring_len: int | None,
    max_slots: int,
    max_len: int,
    dtype: torch.dtype,
    device: torch.device,
    weights: int,
) -> None:
    """The model's weights (``weights`` bytes still to be placed on the device: 0 for a model already there) and
    the state pools and KV cache that ``max_slots`` requests of ``max_len`` positions take (allocated up front,
    ``models.memory.plan_memory``'s count) fit the device (``fit.too_big``), checked before the model loads: else a
    ``ValueError`` naming the model (weights alone too big) or both arguments, where the allocation would fail
    after the load. A folder's weights are counted without an MTP head, which is known only once it loads."""
    from ..fit import too_big, weight_bytes_too_big
    from ..models.memory import plan_memory

    big = weight_bytes_too_big(weights, dtype, device)
    if big:
        raise ValueError(f"model: {big}")
    if not cfg.gdn_layers:
        return
    per = plan_memory(cfg, T=window, L=ring_len, act_bytes=dtype.itemsize,
                      context=max_len)["per_request"]  # fmt: skip
    pool = max_slots * sum(per[b] for b in {backend, shadow} if b is not None)
    big = too_big(pool + weights, device)
    if big:
        with_w = f" with the model's weights ({weights / 2**30:.1f} GiB)" if weights else ""
        raise ValueError(f"max_slots={max_slots}, max_len={max_len}: the requests' GDN state and KV cache "
                         f"({pool / 2**30:.1f} GiB){with_w} {big}; give fewer slots or a shorter max_len")  # fmt: skip


def _weights_to_place(model, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> int:
    """Bytes of weights that loading ``model`` (a folder) or moving it (a ``HybridLM``, ``.to(device, dtype)``) adds
    to ``device``: a folder's whole weights in ``dtype``; for a ``HybridLM``, each floating-point parameter elsewhere
    in full, and each one already there by what its cast to ``dtype`` adds (0 when it keeps or narrows its dtype)."""
    from ..fit import model_bytes

    if not isinstance(model, HybridLM):
        return model_bytes(cfg, dtype)
    index = device.index if device.index is not None or device.type != "cuda" else torch.cuda.current_device()
    size = dtype.itemsize
    grow = 0
    for p in model.parameters():
        new = size if p.is_floating_point() else p.element_size()  # (.to(dtype=) casts floating-point tensors only)
        there = p.device.type == device.type and p.device.index == index
        grow += p.numel() * (max(0, new - p.element_size()) if there else new)
    return grow


class DraftVocabError(ValueError):
    """``draft_vocab`` that this LLM cannot take: no MTP drafter runs, or it reaches beyond the vocabulary."""


def _check_draft_vocab(draft_vocab, vocab: int, runs: str | None, drafter, window: int) -> None:
    """``runs``: "mtp" when the MTP drafter will run, else None (then any ``draft_vocab`` is refused)."""
    if runs != "mtp":
        what = type(drafter).__name__ if not isinstance(drafter, str) else f"drafter={drafter!r}"
        why = "window=1 is plain decode" if window == 1 else f"{what} drafts without the model's MTP head"
        raise DraftVocabError(f"draft_vocab={draft_vocab}: only with the MTP drafter, and {why}")
    dv = RunnerConfig(draft_vocab=draft_vocab).draft_vocab
    if dv > vocab if is_int(dv) else max(dv) >= vocab:
        raise DraftVocabError(f"draft_vocab={draft_vocab}: a count of at most the model's vocabulary ({vocab}), "
                              "or token ids below it")  # fmt: skip


DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DEFAULT_MAX_LEN = 2048  # LLM's max_len when none is given (capped by the model's max_position_embeddings)


def _device_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    """``device``: None (the GPU when there is one), a torch.device or its name, cpu or cuda[:N]; ``dtype``: None
    (bf16 on a GPU, fp32 on the CPU) or one of ``DTYPES``."""
    if isinstance(device, bool):  # (torch.device(False) would be cuda:0)
        raise ValueError(f"device={device!r}: must be cpu, cuda or cuda:N")
    try:
        dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    except (RuntimeError, TypeError):
        raise ValueError(f"device={device!r}: must be cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}: must be cpu, cuda or cuda:N")
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"device={device!r}: no such CUDA GPU here ({torch.cuda.device_count()} present)")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: must be one of torch.float32, torch.float16, torch.bfloat16")
    return dev, dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)
