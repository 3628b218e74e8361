"""Argument checks shared by the public ops. Everything here runs before any tensor is written.

Structural checks (type, rank, shape, dtype, device, contiguity) and the overlap check (no tensor an op writes
shares a byte with another it reads or writes: ``check_no_overlap``, host pointers only) are always done. Value
checks (``cu_seqlens`` contents, slot ids, ``num_accepted``, the ring cursors' ranges) read device tensors back to
the host, so they run only when ``validate=True`` and are skipped automatically while a CUDA graph is being
captured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ._ints import is_int
from .shape import head_dim_error

ACT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensor(
    name: str,
    t,
    *,
    ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    device: torch.device | None = None,
    contiguous: bool = True,
) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if shape is not None and (t.dim() != len(shape) or any(s not in (None, d) for s, d in zip(shape, t.shape))):
        want = tuple("*" if s is None else s for s in shape)
        raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype in ({names}), got {str(t.dtype).replace('torch.', '')}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (shape {tuple(t.shape)}, stride {t.stride()})")


def check_count(name: str, val, least: int = 1) -> int:
    """An integer >= ``least`` (a NumPy integer too, returned as a Python int; a bool is not one)."""
    if not is_int(val) or val < least:
        raise ValueError(f"{name} must be an int >= {least}, got {val!r}")
    return int(val)


def check_flags(**flags) -> None:
    """Each keyword a bool (``validate``, ``update_state``, ...): a string such as "False" would read as true."""
    for name, val in flags.items():
        if not isinstance(val, bool):
            raise TypeError(f"{name} must be a bool, got {val!r}")


def check_eps(eps) -> None:
    """A norm's epsilon: a finite number > 0 (0 or less turns an all-zero row into NaN)."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")


def check_same_dtype(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    first = tensors[0].dtype
    for n, t in zip(names, tensors):
        if t.dtype != first:
            raise TypeError(f"{n} must have dtype {first} like {names[0]}, got {t.dtype}")


def values_checkable(*tensors: torch.Tensor) -> bool:
    """False while capturing a CUDA graph (reading values back would break the capture)."""
    if any(t.is_cuda for t in tensors) and torch.cuda.is_available():
        return not torch.cuda.is_current_stream_capturing()
    return True


def check_cu_seqlens(cu_seqlens: torch.Tensor, num_tokens: int, batch: int, window: int | None) -> None:
    """cu_seqlens: [B+1] int32, starts at 0, ends at num_tokens, every window in [1, window]."""
    cu = cu_seqlens.detach().cpu().tolist()
    if cu[0] != 0 or cu[-1] != num_tokens:
        raise ValueError(f"cu_seqlens must start at 0 and end at the token count {num_tokens}, got {cu}")
    lens = [cu[i + 1] - cu[i] for i in range(batch)]
    if any(n < 1 for n in lens):
        what = "sequence" if window is None else "window"
        raise ValueError(f"cu_seqlens must give every request at least one token, got {what} lengths {lens}")
    if window is not None and any(n > window for n in lens):
        raise ValueError(f"cu_seqlens gives window lengths {lens}, longer than the window T={window}")


def check_slots(name: str, slots: torch.Tensor, num_slots: int) -> list[int]:
    """Slot ids in [-1, num_slots), -1 is padding, no id twice. Returns them as a list."""
    ids = slots.detach().cpu().tolist()
    bad = [s for s in ids if s < -1 or s >= num_slots]
    if bad:
        raise ValueError(f"{name} holds ids {bad} outside [-1, {num_slots}) (-1 marks padding)")
    live = [s for s in ids if s >= 0]
    if len(set(live)) != len(live):
        dup = sorted({s for s in live if live.count(s) > 1})
        raise ValueError(f"{name} holds slot ids {dup} more than once")
    return ids


def check_gdn_inputs(q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens) -> tuple[int, int, int, int, int, int]:
    """Structural checks of the per-token activations; returns (N, B, H, HV, K, V)."""
    check_tensor("q", q, ndim=3, dtypes=ACT_DTYPES)
    N, H, K = q.shape
    if H < 1:
        raise ValueError(f"q must have at least one key head, got shape {tuple(q.shape)}")
    dev = q.device
    check_tensor("k", k, shape=(N, H, K), dtypes=ACT_DTYPES, device=dev)
    check_tensor("v", v, ndim=3, dtypes=ACT_DTYPES, device=dev)
    if v.shape[0] != N:
        raise ValueError(f"v must have {N} tokens like q, got shape {tuple(v.shape)}")
    HV, V = v.shape[1], v.shape[2]
    if HV % H:
        raise ValueError(f"v's value heads HV={HV} must be a multiple of q's key heads H={H}")
    check_tensor("a", a, shape=(N, HV), dtypes=ACT_DTYPES, device=dev)
    check_tensor("b", b, shape=(N, HV), dtypes=ACT_DTYPES, device=dev)
    check_same_dtype(("q", "k", "v", "a", "b"), (q, k, v, a, b))
    check_tensor("A_log", A_log, shape=(HV,), dtypes=ACT_DTYPES, device=dev)
    check_tensor("dt_bias", dt_bias, shape=(HV,), dtypes=ACT_DTYPES, device=dev)
    for name, d in (("K", K), ("V", V)):
        if err := head_dim_error(f"head dim {name}", d):
            raise ValueError(err)
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=dev)
    B = slots.shape[0]
    check_tensor("cu_seqlens", cu_seqlens, shape=(B + 1,), dtypes=(torch.int32,), device=dev)
    return N, B, H, HV, K, V


def check_state(name: str, state, HV: int, V: int, K: int, device) -> int:
    """state / checkpoint: [S, HV, V, K] fp32 contiguous. Returns S."""
    check_tensor(name, state, ndim=4, dtypes=(torch.float32,), device=device)
    if tuple(state.shape[1:]) != (HV, V, K):
        raise ValueError(f"{name} must have shape (S, {HV}, {V}, {K}), got {tuple(state.shape)}")
    return state.shape[0]


def check_out(out, v: torch.Tensor) -> None:
    """Optional output buffer of the window ops: [N, HV, V] in v's dtype (that it shares no memory with the op's other
    tensors is ``check_no_overlap``'s)."""
    if out is not None:
        check_tensor("out", out, shape=tuple(v.shape), dtypes=(v.dtype,), device=v.device)


def byte_spans(pairs, *, written: bool = True) -> list[tuple[int, int, str, bool]]:
    """(first byte, last byte + 1, name, written) of each (name, tensor) pair (None and empty tensors skipped);
    ``written=False`` marks tensors the op only reads. What ``check_no_overlap`` sorts; a ring caches its own
    (``Ring.written_spans``)."""
    return [(*sp, name, written) for name, t in pairs if isinstance(t, torch.Tensor) and (sp := _span(t))]


def named(**tensors) -> tuple:
    """``check_no_overlap``'s (name, tensor) pairs from keyword arguments: ``named(q=q, slots=slots)``."""
    return tuple(tensors.items())


def check_no_overlap(written, read, *, spans=()) -> None:
    """No tensor the op writes (``written``: (name, tensor) pairs, None skipped; ``spans``: more of them, from
    ``byte_spans``) shares a byte with another tensor it writes or reads (``read``: (name, tensor) pairs); two tensors
    it only reads may. A kernel would read what it already wrote, and its reference differently. The error names both
    tensors. Always checked (host pointers only: it never syncs, so graph capture runs it too); one sort of the byte
    spans: ~1.5 us a verify on a CPU core, whose ring brings its spans cached (``Ring.written_spans``)."""
    every = [*spans, *byte_spans(written), *byte_spans(read, written=False)]
    every.sort(key=_first)
    end_any = end_written = -1
    reach_any = reach_written = ""  # the name of the span that reaches furthest (of any / of the written ones)
    for lo, hi, name, writes in every:
        if writes and lo < end_any:
            _overlap(name, reach_any)
        if not writes and lo < end_written:
            _overlap(reach_written, name)
        if hi > end_any:
            end_any, reach_any = hi, name
        if writes and hi > end_written:
            end_written, reach_written = hi, name


def _overlap(written: str, other: str) -> None:
    what = "another part of itself" if written == other else other
    raise ValueError(
        f"{written} must not overlap {what} in memory (the op writes {written}: every tensor argument it writes must "
        "share no byte with any other tensor argument)"
    )


def _first(span: tuple) -> int:
    return span[0]


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    """The bytes [first, last + 1) a tensor's elements lie in (None when it has none); device-qualified, so that
    tensors on two devices never compare as overlapping. None for a meta tensor too: it has no bytes."""
    if t.numel() == 0 or t.is_meta:
        return None
    lo = t.data_ptr()
    if t.is_contiguous():
        hi = lo + t.numel() * t.element_size()
    else:
        hi = lo + (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()
    off = ((t.device.index or 0) + 1) << 80 if t.is_cuda else 0
    return lo + off, hi + off


def check_scale(scale, K: int) -> float:
    """The query scale: None (K**-0.5) or a finite positive Python number; returned as a float.

    Tensors are refused (a 0-d tensor would be read back on one path and captured on the other)."""
    if scale is None:
        return K**-0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a Python float or None, got {type(scale).__name__}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite positive number, got {scale}")
    return scale
