"""SGLang 0.5.16's ring decode (``--enable-linear-replayssm``, plain one-token decode) as a peer.

Split from ``sglang_peer`` (same conventions, same ``_Peer`` base); see that module's docstring for
how SGLang's engine drives it.
"""

from __future__ import annotations

import types

import torch

from ..ops._validate import check_tensor
from .sglang_peer import _check_call, _nbytes, _Peer


class SGLangRingDecodePeer(_Peer):
    """SGLang's ReplaySSM one-token decode ring (``--enable-linear-replayssm``).

    Buffers: ``checkpoint`` [S, HV, V, K] fp32 (read every step, written on flush); ``d_cache``
    [S, HV, L, V] and ``k_cache`` [S, H, L, K] in ``ring_dtype`` (the engine uses the SSM dtype,
    fp32, for this ring); ``g_cache`` [S, HV, L] fp32; per-slot cursor ``write_pos`` int32 [S]. The
    ring is linear: record ``j`` at position ``j``; the step that finds ``write_pos == L - 1`` (or a
    forced flush) folds ring + token into the checkpoint, and the cursor returns to 0.

    ``decode`` / ``decode_packed`` run a whole step (cursor snapshot, kernel, cursor advance); the
    engine snapshots and advances outside its CUDA graph, so ``decode_packed(...,
    row_write_pos=row_cursors(slots))`` + ``advance`` time the kernel the way the engine runs it.
    """

    def __init__(
        self,
        num_slots: int,
        H: int,
        HV: int,
        K: int,
        V: int,
        *,
        L: int = 16,
        dtype: torch.dtype = torch.bfloat16,
        ring_dtype: torch.dtype = torch.float32,
        device=None,
        kernels: types.SimpleNamespace | None = None,
        wheel_path: str | None = None,
        scale: float | None = None,
        **launch,
    ):
        if not isinstance(L, int) or L < 1:
            raise ValueError(f"L must be an int >= 1, got {L!r}")
        self._init_common(num_slots, H, HV, K, V, dtype, device, kernels, wheel_path, scale)
        self.L, self.ring_dtype, self.launch = L, ring_dtype, dict(launch)
        S = num_slots
        self.checkpoint = self._zeros(S, HV, V, K, dtype=torch.float32)
        self.d_cache = self._zeros(S, HV, L, V, dtype=ring_dtype)
        self.k_cache = self._zeros(S, H, L, K, dtype=ring_dtype)
        self.g_cache = self._zeros(S, HV, L, dtype=torch.float32)
        self._write_pos = self._zeros(S + 1, dtype=torch.int32)  # last entry: scratch for padding rows
        self.write_pos = self._write_pos[:S]
        self._unit_cu: dict[int, torch.Tensor] = {}

    @property
    def nbytes(self) -> int:
        """Bytes of the three ring caches (one layer)."""
        return _nbytes(self.d_cache, self.k_cache, self.g_cache)

    @staticmethod
    def pack(q, k, v):
        """[B, H, K] x2 + [B, HV, V] -> the packed ``mixed_qkv`` [B, 2*H*K + HV*V] the kernel reads."""
        return torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], dim=1)

    def decode(self, q, k, v, a, b, A_log, dt_bias, slots, *, out=None, force_flush=None):
        """One token per row: q, k [B, H, K], v [B, HV, V], a, b [B, HV], slots [B] int32.
        Returns o [B, HV, V]. Packs q|k|v first (the engine gets ``mixed_qkv`` packed from the conv)."""
        B = slots.shape[0]
        if B not in self._unit_cu:  # cu_seqlens of one token per row, only for the shape checks
            self._unit_cu[B] = torch.arange(B + 1, dtype=torch.int32, device=self.device)
        _check_call(self, q, k, v, a, b, A_log, dt_bias, slots, self._unit_cu[B])
        if q.shape[0] != slots.shape[0]:
            raise ValueError(f"decode takes one token per row: {q.shape[0]} tokens for {slots.shape[0]} rows")
        return self.decode_packed(self.pack(q, k, v), a, b, A_log, dt_bias, slots, out=out, force_flush=force_flush)

    def row_cursors(self, slots):
        """Per-row snapshot of the slot cursors, ``write_pos[slots]`` [B] int32 (padding rows read slot 0):
        what the engine's metadata build hands to every layer's decode."""
        return self._write_pos[slots.long().clamp(min=0)]

    def advance(self, slots, row_write_pos, force_flush=None):
        """The engine's cursor advance after a decode step: 0 for rows that flushed, else +1 (device-side)."""
        keep = row_write_pos != self.L - 1
        if force_flush is not None:
            keep = keep & (force_flush == 0)
        nxt = (row_write_pos + 1) * keep
        self._write_pos.index_copy_(0, torch.where(slots >= 0, slots.long(), self.num_slots), nxt.to(torch.int32))

    def decode_packed(self, mixed_qkv, a, b, A_log, dt_bias, slots, *, out=None, force_flush=None, row_write_pos=None):
        """The engine's kernel call on packed ``mixed_qkv`` [B, 2*H*K + HV*V]; returns o [B, HV, V].

        Without ``row_write_pos`` it snapshots the row cursors, runs the kernel and advances the slot
        cursors (a whole step, capturable). With ``row_write_pos`` (from ``row_cursors``) it only
        launches the kernel and leaves the cursors to the caller (``advance``): the engine does the
        snapshot and the advance outside its CUDA graph, so time this form to compare kernels."""
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
        B = slots.shape[0]
        if out is None:
            out = mixed_qkv.new_empty(B, self.HV, self.V)
        else:
            check_tensor("out", out, shape=(B, self.HV, self.V), dtypes=(mixed_qkv.dtype,), device=self.device)
        if B == 0:
            return out
        step = row_write_pos is None
        if step:
            row_write_pos = self.row_cursors(slots)
        self.kernels.fused_recurrent_gdn_replayssm_decode(
            mixed_qkv=mixed_qkv, a=a, b=b, A_log=A_log, dt_bias=dt_bias, scale=self.scale,
            initial_state=self.checkpoint, d_cache=self.d_cache, k_cache=self.k_cache, g_cache=self.g_cache,
            out=out.view(B, 1, self.HV, self.V), ssm_state_indices=slots, write_pos=row_write_pos,
            force_flush=force_flush, use_qk_l2norm_in_kernel=True, **self.launch,
        )  # fmt: skip
        if step:
            self.advance(slots, row_write_pos, force_flush)
        return out

    def reset(self, slots):
        """Empty the rings of ``slots`` (the engine zeroes ``write_pos`` when it allocates a slot)."""
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
        self._write_pos.index_fill_(0, torch.where(slots >= 0, slots.long(), self.num_slots), 0)

    def committed_state(self, slots, *, out=None):
        """State after the last decoded token of ``slots`` ([B, HV, V, K] fp32, padding rows zero):
        the checkpoint plus the ring's records, reconstructed in fp32 torch (for tests; the kernel
        itself never materialises it): ``exp(G) S0 + sum_j exp(G - P_j) d_j k_j^T``."""
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
        live = slots >= 0
        idx = slots.long().clamp(min=0)
        wp = self._write_pos[idx]
        valid = torch.arange(self.L, device=self.device)[None, None, :] < wp[:, None, None]  # [B, 1, L]
        g = torch.where(valid, self.g_cache[idx], 0.0)  # [B, HV, L]
        P = torch.cumsum(g, dim=-1)
        G = P[..., -1:]
        w = torch.where(valid, torch.exp(G - P), 0.0)
        kk = self.k_cache[idx].float().repeat_interleave(self.HV // self.H, dim=1)  # [B, HV, L, K]
        h = torch.exp(G)[..., None] * self.checkpoint[idx] + torch.einsum(
            "bhl,bhlv,bhlk->bhvk", w, self.d_cache[idx].float(), kk
        )
        h = torch.where(live[:, None, None, None], h, 0.0)
        if out is None:
            return h
        return out.copy_(h)
