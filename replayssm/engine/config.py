"""What a ``ModelRunner`` is built from: ``RunnerConfig`` (checked on construction), the GDN pool layout it
implies (``pool_config``), and the CPU copy of a preempted request (``ParkedRequest``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from ..models.model import HybridLM
from ..ops.ring import MAX_RING_LEN, ring_length_for
from ..state import PoolConfig
from ..state.backend import Parked
from ..state.config import BACKENDS
from .checks import is_int
from .draft_head import draft_ids

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class RunnerConfig:
    """``window`` = T (last accepted token + drafts; 1 = plain decode only). ``ring_len``: the replay backend's ring
    length L, a power of two from 2 * window to 65,536 (``ops.ring.MAX_RING_LEN``), taken as given (as
    ``PoolConfig.ring_len`` and the CLI's ``--ring``); None (default) derives it, ``ring_length_for(window)``: 16,
    or the least power of two >= 2 * window (stored resolved, so equal configs compare equal). ``validate``: the
    pool's host-side protocol checks (turned off automatically with CUDA graphs). ``shadow_backend``: a second pool
    fed the same inputs (``LockstepPool``), for bitwise checks. ``kv_tokens``: paged KV memory shared by all slots,
    in tokens (None: ``max_len`` for every slot); ``page_size``: a KV cache page, in tokens.
    ``device_drafter="mtp"``: draft inside the step with the model's MTP head (window >= 2); ``draft_head``: that
    drafter's LM head, "model", "fp8" or "auto"; ``draft_vocab``: the tokens it may draft, None (all), an int N (the
    N lowest ids) or a tuple of token ids (``engine/draft_head.py``; any sequence or 1-d tensor is stored as a
    tuple). Errors name the field as the caller passed it (``window=``, ...)."""

    backend: str = "replay"
    max_slots: int = 16
    max_len: int = 2048  # as LLM's default where the model allows it
    window: int = 4
    ring_len: int | None = None
    cuda_graphs: bool = True
    validate: bool = True
    shadow_backend: str | None = None
    kv_tokens: int | None = None
    page_size: int = 64
    device_drafter: str | None = None
    draft_head: str = "auto"
    draft_vocab: int | tuple[int, ...] | None = None

    def __post_init__(self):
        if self.draft_vocab is not None and not is_int(self.draft_vocab):  # ids: checked, stored as a tuple
            ids = draft_ids(self.draft_vocab, sys.maxsize)  # the vocabulary bound is checked with the model
            object.__setattr__(self, "draft_vocab", tuple(ids.tolist()))
        draft_ids(self.draft_vocab, sys.maxsize)  # an int N: N >= 1
        if self.ring_len is None and is_int(self.window) and self.window >= 1:
            object.__setattr__(self, "ring_len", ring_length_for(int(self.window)))
        for name in ("max_slots", "max_len", "window", "ring_len", "page_size"):
            val = getattr(self, name)
            if not is_int(val) or val < 1:
                raise ValueError(f"{name}={val!r}: must be a positive int")
            object.__setattr__(self, name, int(val))  # a NumPy integer taken as the int it is
        if self.kv_tokens is not None and is_int(self.kv_tokens):
            object.__setattr__(self, "kv_tokens", int(self.kv_tokens))
        for name in ("ring_len", "page_size"):
            val = getattr(self, name)
            if val & (val - 1):
                raise ValueError(f"{name}={val}: must be a power of two")
        if not 2 * self.window <= self.ring_len <= MAX_RING_LEN:
            raise ValueError(f"ring_len={self.ring_len}: must be from 2 * window = {2 * self.window} to {MAX_RING_LEN} "
                             "(or None: derived from the window)")  # fmt: skip
        if self.kv_tokens is not None and (not is_int(self.kv_tokens) or self.kv_tokens < 1):
            raise ValueError(f"kv_tokens={self.kv_tokens!r}: must be a positive int or None")
        for name in ("backend", "shadow_backend"):
            val = getattr(self, name)
            if not (val is None and name == "shadow_backend") and val not in BACKENDS:
                raise ValueError(f"{name}={val!r}: must be one of {BACKENDS}")
        for name in ("cuda_graphs", "validate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}={getattr(self, name)!r}: must be a bool")
        if self.window + 1 > self.max_len:
            raise ValueError(f"max_len={self.max_len} leaves no room for a prompt and a window of {self.window}")
        if self.device_drafter not in (None, "mtp"):
            raise ValueError(f"device_drafter must be None or 'mtp', got {self.device_drafter!r}")
        if self.draft_head not in ("auto", "model", "fp8"):
            raise ValueError(f"draft_head must be 'auto', 'model' or 'fp8', got {self.draft_head!r}")


@dataclass(frozen=True)
class ParkedRequest:
    """A preempted request's state on the CPU: its GDN slots, its KV cache rows, its device drafter's state."""

    gdn: Parked
    kv: dict[str, torch.Tensor]
    drafter: dict | None = None

    def check_fits(self, pool, kv, drafter, room: bool = True) -> None:
        """Raise unless a runner of this pool, KV cache and device drafter (or None) can restore it now: the same
        drafter setup, KV rows, drafter state and GDN state of their layouts, and (``room``) room in the pool and
        in the KV caches for a fresh slot (which holds no pages). ``ModelRunner.restore`` asks before it
        allocates."""
        if not isinstance(self, ParkedRequest):  # (called as ParkedRequest.check_fits(parked, ...))
            raise TypeError(f"parked must be a ParkedRequest (from offload), got {type(self).__name__}")
        if (drafter is None) != (self.drafter is None):
            raise ValueError("parked with a different drafter setup than this runner's (device_drafter)")
        for part in self.gdn if isinstance(self.gdn, tuple) else (self.gdn,):
            n = getattr(part, "num_slots", None)  # (not a ParkedSlots: pool.check_restore below names it)
            if n is not None and n != 1:
                raise ValueError(f"parked GDN state of {n} slots: a ParkedRequest holds one request's (one slot)")
        kv.check_parked(self.kv, 1)
        if drafter is not None:
            drafter.check_parked(self.drafter, 1)
        pool.check_restore(self.gdn, room)
        if room:
            kv.check_room([int(self.kv["lens"][0])])
            if drafter is not None:
                drafter.kv.check_room([int(self.drafter["kv"]["lens"][0])])


def padded(n: int) -> int:
    """The captured batch size a step of ``n`` rows runs at."""
    return next((b for b in GRAPH_BATCH_SIZES if b >= n), n)


def uses_graphs(model: HybridLM, cfg: RunnerConfig) -> bool:
    return cfg.cuda_graphs and next(model.parameters()).is_cuda


def pool_config(model: HybridLM, cfg: RunnerConfig) -> PoolConfig:
    """The GDN state layout a runner of ``cfg`` needs for ``model`` (on the model's device, in its dtype)."""
    mc, p = model.config, next(model.parameters())
    shape = mc.gdn_shape
    return PoolConfig(
        num_slots=cfg.max_slots, num_layers=len(mc.gdn_layers), H=shape.H, HV=shape.HV, K=shape.K, V=shape.V,
        window=cfg.window, ring_len=cfg.ring_len, backend=cfg.backend, dtype=p.dtype,
        conv_kernel=mc.conv_kernel, max_batch=padded(cfg.max_slots), device=p.device,
        validate=cfg.validate and not uses_graphs(model, cfg),
    )  # fmt: skip
