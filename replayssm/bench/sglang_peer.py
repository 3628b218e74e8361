"""SGLang 0.5.16's GDN kernels as benchmark peers, loaded at run time from the PyPI wheel's own files.

Nothing of SGLang's code lives in this repository: ``load_sglang_kernels`` opens the wheel, extracts
four ``.py`` files that import only torch and triton, imports them under private module names and
hands back their functions. The peer classes allocate SGLang's buffers and call those functions
with the arguments SGLang's engine uses (``sglang/srt/layers/attention/linear/gdn_backend.py``,
``sglang/srt/speculative/spec_utils.py``, ``sglang/srt/mem_cache/memory_pool.py`` in the same wheel).

Peers and their engine conventions:

- ``SGLangReplayPeer`` (``--enable-gdn-replayssm-spec``): fp32 checkpoint ``[S, HV, V, K]`` plus six
  per-slot ring caches of length ``L`` (``d`` and normalised ``k`` for the outputs, raw ``v`` / raw
  ``k`` / fp32 ``g`` / fp32 ``beta`` for the exact fold; ``d, k, rawv, rawk`` in the activation
  dtype). Cursors are *block-keyed* (indexed by the slot id): ``write_pos`` int32, ``cache_base``
  int32, ``is_flush`` **int8**. ``verify`` = ``gdn_replayssm_spec_decode`` (three launches: exact
  fold of flushing rows, verify of the other rows, verify of the flushing rows from the folded
  checkpoint), ``commit`` = ``commit_gdn_replayssm_spec`` (one single-program launch). The engine
  passes ``null_block_id=-1`` (padding rows carry slot -1, as ours), ``max_cache_len = L`` (ring
  length, ``d_cache.shape[-2]``), ``max_spec_len = draft_token_num`` (our ``T``),
  ``use_qk_l2norm_in_kernel=True``, ``scale = K**-0.5``, ``cache_buf_len`` left at its default
  (``= max_cache_len``; it is the modulus of the base rotation and must equal the ring length) and
  every launch parameter at the function's default (``block_v=64, num_warps=1, num_stages=2, nk=2,
  bs_min=4`` for both verify launches, ``dot_precision="tf32"``; the fold is fixed at
  ``BV=min(V, 32), num_warps=1, num_stages=3``, the recurrent kernel's tile).
- ``SGLangRecurrentPeer`` (the engine without the flag): ``fused_sigmoid_gating_delta_rule_update``
  with ``disable_state_update=True`` writes the state after every window token into
  ``intermediate_ssm`` ``[B_max, T, HV, V, K]`` fp32, row ``i`` of the batch at
  ``intermediate_state_indices[i] = i``. After acceptance the engine calls
  ``fused_mamba_state_scatter_with_mask(temporal, intermediate_ssm, state_indices,
  last_correct_step)`` with ``last_correct_step = num_accepted - 1`` for a linear draft chain:
  ``state[slot_i] = intermediate[i, num_accepted_i - 1]``, skipping rows with a negative step or
  slot. That Triton scatter is the default here (``scatter="sglang"``); ``scatter="torch"`` does the
  same copy with device-side torch indexing.
- ``SGLangRingDecodePeer`` (in ``sglang_decode_peer``; ``--enable-linear-replayssm``, plain one-token decode):
  ``fused_recurrent_gdn_replayssm_decode`` on packed ``mixed_qkv = [q | k | v]`` with a *per-row*
  ``write_pos`` snapshot gathered from the per-slot cursor; the ring is linear (not circular) and
  flushes (open-loop: ``d`` records folded with tensor-core dots, not bitwise) when
  ``write_pos == L - 1``; the engine advances the cursor to ``0`` after a flush, else ``+1``.

All ``verify`` / ``commit`` / ``decode`` / ``reset`` methods only launch kernels and device-side
torch ops (no ``.item()``, no host reads), so they can be captured in a CUDA graph. They run on the
CPU too, with ``TRITON_INTERPRET=1`` set before ``load_sglang_kernels`` is first called.
"""

from __future__ import annotations

import types

import torch

from ..ops._validate import check_gdn_inputs, check_tensor
from .sglang_wheel import _SCATTER_BLOCK, load_sglang_kernels


def _check_dims(num_slots, H, HV, K, V):
    for n, x in (("num_slots", num_slots), ("H", H), ("HV", HV), ("K", K), ("V", V)):
        if not isinstance(x, int) or x < 1:
            raise ValueError(f"{n} must be a positive int, got {x!r}")
    if HV % H:
        raise ValueError(f"HV={HV} must be a multiple of H={H}")


def _check_call(peer, q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens):
    """Structural checks only (no value reads, so capturable); returns (N, B)."""
    N, B, H, HV, K, V = check_gdn_inputs(q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens)
    if (H, HV, K, V) != (peer.H, peer.HV, peer.K, peer.V):
        raise ValueError(f"inputs have (H, HV, K, V)={(H, HV, K, V)}, the peer was built for {peer.geometry}")
    if q.device != peer.device:
        raise ValueError(f"inputs are on {q.device}, the peer's buffers on {peer.device}")
    if q.dtype != peer.dtype:
        raise TypeError(f"inputs are {q.dtype}, the peer's ring records are {peer.dtype}")
    return N, B


def _nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


class _Peer:
    def _init_common(self, num_slots, H, HV, K, V, dtype, device, kernels, wheel_path, scale):
        _check_dims(num_slots, H, HV, K, V)
        self.num_slots, self.H, self.HV, self.K, self.V = num_slots, H, HV, K, V
        self.dtype = dtype
        self.device = torch.empty(0, device=device).device  # normalised: "cuda" -> cuda:<current>
        self.scale = K**-0.5 if scale is None else float(scale)
        self.kernels = kernels if kernels is not None else load_sglang_kernels(wheel_path)

    @property
    def geometry(self):
        return (self.H, self.HV, self.K, self.V)

    def _zeros(self, *shape, dtype):
        return torch.zeros(shape, dtype=dtype, device=self.device)


class SGLangReplayPeer(_Peer):
    """SGLang's ReplaySSM spec-verify (checkpoint + six-buffer circular ring, block-keyed cursors).

    Buffers (zero-initialised, as SGLang's pool): ``checkpoint`` [S, HV, V, K] fp32; ``d_cache``,
    ``rawv_cache`` [S, HV, L, V] and ``k_cache``, ``rawk_cache`` [S, H, L, K] in ``dtype`` (the
    engine's conv/activation dtype); ``g_cache``, ``beta_cache`` [S, HV, L] fp32; cursors
    ``write_pos``, ``cache_base`` int32 [S] and ``is_flush`` int8 [S]. A fresh slot (all cursors 0)
    has an empty ring, so writing a state into ``checkpoint[slot]`` starts it from that state.

    ``launch`` overrides ``gdn_replayssm_spec_decode``'s launch keywords (``block_v``, ``num_warps``,
    ``num_stages``, ``nk``, ``bs_min``, ``*_flush``, ``dot_precision``, ``launch_mode``); empty by
    default, which is the engine's call (it passes none of them).
    """

    def __init__(
        self,
        num_slots: int,
        H: int,
        HV: int,
        K: int,
        V: int,
        *,
        T: int,
        L: int = 16,
        dtype: torch.dtype = torch.bfloat16,
        device=None,
        kernels: types.SimpleNamespace | None = None,
        wheel_path: str | None = None,
        scale: float | None = None,
        **launch,
    ):
        if not isinstance(T, int) or T < 1:
            raise ValueError(f"T must be an int >= 1, got {T!r}")
        if not isinstance(L, int) or L < 2 or L & (L - 1) or L < 2 * T:
            raise ValueError(f"L must be a power of two >= 2 * T = {2 * T} (SGLang's early-flush margin), got {L!r}")
        self._init_common(num_slots, H, HV, K, V, dtype, device, kernels, wheel_path, scale)
        self.T, self.L = T, L
        self.launch = dict(launch)
        S = num_slots
        self.checkpoint = self._zeros(S, HV, V, K, dtype=torch.float32)
        self.d_cache = self._zeros(S, HV, L, V, dtype=dtype)
        self.k_cache = self._zeros(S, H, L, K, dtype=dtype)
        self.g_cache = self._zeros(S, HV, L, dtype=torch.float32)
        self.rawv_cache = self._zeros(S, HV, L, V, dtype=dtype)
        self.rawk_cache = self._zeros(S, H, L, K, dtype=dtype)
        self.beta_cache = self._zeros(S, HV, L, dtype=torch.float32)
        self.write_pos = self._zeros(S, dtype=torch.int32)
        self.cache_base = self._zeros(S, dtype=torch.int32)
        self.is_flush = self._zeros(S, dtype=torch.int8)

    @property
    def caches(self):
        return (self.d_cache, self.k_cache, self.g_cache, self.rawv_cache, self.rawk_cache, self.beta_cache)

    @property
    def nbytes(self) -> int:
        """Bytes of the six ring caches (one layer; checkpoint and cursors excluded)."""
        return _nbytes(*self.caches)

    @property
    def cursor_nbytes(self) -> int:
        """Bytes of the per-slot cursors (shared by all layers in the engine)."""
        return _nbytes(self.write_pos, self.cache_base, self.is_flush)

    def verify(self, q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens, *, out=None):
        """Window outputs [N, HV, V] (v's dtype). Folds flushing rows' checkpoints and writes the
        window's ring records; cursors are not moved (``commit`` does that). Every window must be
        1..T tokens (not checked: that would read ``cu_seqlens`` back). Padding rows output zeros."""
        N, B = _check_call(self, q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens)
        if out is None:
            out = torch.empty_like(v)
        else:
            check_tensor("out", out, shape=tuple(v.shape), dtypes=(v.dtype,), device=v.device)
        if B == 0:
            return out
        self.kernels.gdn_replayssm_spec_decode(
            q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias,
            checkpoint_state=self.checkpoint, d_cache=self.d_cache, k_cache=self.k_cache, g_cache=self.g_cache,
            rawv_cache=self.rawv_cache, rawk_cache=self.rawk_cache, beta_cache=self.beta_cache,
            out=out, query_start_loc=cu_seqlens, ssm_state_indices=slots,
            write_pos=self.write_pos, cache_base=self.cache_base, is_flush=self.is_flush,
            max_cache_len=self.L, max_spec_len=self.T, scale=self.scale,
            use_qk_l2norm_in_kernel=True, null_block_id=-1, **self.launch,
        )  # fmt: skip
        return out

    def commit(self, slots, num_accepted):
        """Advance the cursors of ``slots`` by ``num_accepted`` [B] int32 (bonus token included)."""
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
        check_tensor("num_accepted", num_accepted, shape=(slots.shape[0],), dtypes=(torch.int32,), device=self.device)
        if slots.shape[0]:
            self.kernels.commit_gdn_replayssm_spec(
                write_pos=self.write_pos, cache_base=self.cache_base, is_flush=self.is_flush,
                num_accepted=num_accepted, state_batch_indices=slots,
                max_cache_len=self.L, max_spec_len=self.T, null_block_id=-1,
            )  # fmt: skip

    def reset(self, slots):
        """Empty the rings of ``slots`` (SGLang's reset kernel; the engine writes the same zeros with
        torch indexing when it allocates a slot). Checkpoints are left as they are."""
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
        if slots.shape[0]:
            self.kernels.reset_gdn_replayssm_spec_cursors(
                write_pos=self.write_pos, cache_base=self.cache_base, is_flush=self.is_flush,
                do_reset=torch.ones_like(slots), state_batch_indices=slots,
                max_cache_len=self.L, max_spec_len=self.T, null_block_id=-1,
            )  # fmt: skip

    def committed_state(self, slots, *, out=None):
        """The committed state of ``slots`` ([B, HV, V, K] fp32; padding rows zero), without mutation.

        Gathers each slot's checkpoint and ring into scratch copies and runs SGLang's own exact-fold
        launcher over the committed history (``write_pos`` records from ``cache_base``), i.e. what
        its next flush would write. Valid between steps (after ``commit``, before ``verify``): a
        flushing ``verify`` folds the checkpoint before ``commit`` moves the cursors.
        """
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
        B = slots.shape[0]
        live = slots >= 0
        idx = slots.long().clamp(min=0)
        h = self.checkpoint[idx]
        if B:
            rows = torch.arange(B, dtype=torch.int32, device=self.device)
            self.kernels.launch_gdn_exact_fold(
                checkpoint_state=h, rawv_cache=self.rawv_cache[idx], rawk_cache=self.rawk_cache[idx],
                g_cache=self.g_cache[idx], beta_cache=self.beta_cache[idx],
                query_start_loc=torch.zeros(B + 1, dtype=torch.int32, device=self.device),
                ssm_state_indices=torch.where(live, rows, -1), write_pos=self.write_pos[idx],
                cache_base=self.cache_base[idx], is_flush=torch.ones(B, dtype=torch.int8, device=self.device),
                max_cache_len=self.L, use_qk_l2norm_in_kernel=True, null_block_id=-1, num_k_heads=self.H,
            )  # fmt: skip
        h = torch.where(live[:, None, None, None], h, 0.0)
        if out is None:
            return h
        return out.copy_(h)


class SGLangRecurrentPeer(_Peer):
    """SGLang's recurrent target-verify: a snapshot per window token, then the accepted one copied back.

    ``state`` [S, HV, V, K] fp32 is the pool (a view of S + 1 rows; the extra row is the target of
    padding rows in ``scatter="torch"``), ``intermediate`` [max_batch, T, HV, V, K] fp32 the
    ``intermediate_ssm`` buffer of one layer. ``scatter``: "sglang" (the engine's
    ``fused_mamba_state_scatter_with_mask``; on the CPU its Triton kernel is launched directly,
    since the wrapper refuses CPU tensors) or "torch" (device-side index_select + index_copy_).
    """

    SCATTERS = ("sglang", "torch")

    def __init__(
        self,
        num_slots: int,
        H: int,
        HV: int,
        K: int,
        V: int,
        *,
        T: int,
        max_batch: int,
        dtype: torch.dtype = torch.bfloat16,
        device=None,
        kernels: types.SimpleNamespace | None = None,
        wheel_path: str | None = None,
        scale: float | None = None,
        scatter: str = "sglang",
    ):
        if not isinstance(T, int) or T < 1:
            raise ValueError(f"T must be an int >= 1, got {T!r}")
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        if scatter not in self.SCATTERS:
            raise ValueError(f"scatter must be one of {self.SCATTERS}, got {scatter!r}")
        self._init_common(num_slots, H, HV, K, V, dtype, device, kernels, wheel_path, scale)
        self.T, self.max_batch, self.scatter = T, max_batch, scatter
        self._pool = self._zeros(num_slots + 1, HV, V, K, dtype=torch.float32)
        self.state = self._pool[:num_slots]
        self.intermediate = self._zeros(max_batch, T, HV, V, K, dtype=torch.float32)
        self._rows = torch.arange(max_batch, dtype=torch.int32, device=self.device)
        self._rows64 = self._rows.long()

    @property
    def nbytes(self) -> int:
        """Bytes of the ``intermediate_ssm`` snapshot buffer (one layer)."""
        return _nbytes(self.intermediate)

    def verify(self, q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens):
        """Window outputs [N, HV, V] (q's dtype, allocated by SGLang's wrapper); writes the state
        after each token of row i to ``intermediate[i, t]``; the pool is not updated. Windows must
        be 1..T tokens (not checked). Padding rows (slot -1) run from a zero state, as in SGLang."""
        N, B = _check_call(self, q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens)
        if B > self.max_batch:
            raise ValueError(f"batch of {B} rows exceeds max_batch={self.max_batch}")
        if B == 0:
            return torch.empty_like(v)
        o = self.kernels.fused_sigmoid_gating_delta_rule_update(
            A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0,
            q=q.unsqueeze(0), k=k.unsqueeze(0), v=v.unsqueeze(0), b=b,
            initial_state_source=self._pool, initial_state_indices=slots, scale=self.scale,
            use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens, is_kda=False, disable_state_update=True,
            intermediate_states_buffer=self.intermediate, intermediate_state_indices=self._rows[:B],
            cache_steps=self.T, retrieve_parent_token=None,
        )  # fmt: skip
        return o.view(N, self.HV, self.V)

    def commit(self, slots, num_accepted):
        """``state[slots[i]] = intermediate[i, num_accepted[i] - 1]`` for live rows (device-side)."""
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
        B = slots.shape[0]
        check_tensor("num_accepted", num_accepted, shape=(B,), dtypes=(torch.int32,), device=self.device)
        if B == 0:
            return
        if B > self.max_batch:
            raise ValueError(f"batch of {B} rows exceeds max_batch={self.max_batch}")
        steps = num_accepted - 1  # the engine's last_correct_step_indices for a linear draft chain
        if self.scatter == "torch":
            live = (slots >= 0) & (steps >= 0)
            dst = torch.where(live, slots.long(), self.num_slots)  # dead rows land in the scratch row
            src = self.intermediate[self._rows64[:B], steps.clamp(min=0).long()]
            self._pool.index_copy_(0, dst, src)
            return
        dst, src = self._pool.unsqueeze(0), self.intermediate.unsqueeze(0)  # [layers=1, ...]
        if dst.is_cuda:
            self.kernels.fused_mamba_state_scatter_with_mask(dst, src, slots, steps)
            return
        elems = self.HV * self.V * self.K
        grid = (B, 1, -(-elems // _SCATTER_BLOCK))
        self.kernels.mamba_state_scatter_kernel[grid](
            src, dst, slots, steps, elems, src.stride(0), src.stride(1), src.stride(2), dst.stride(0), dst.stride(1),
            src.shape[1], src.shape[2], dst.shape[1], BLOCK_SIZE=_SCATTER_BLOCK,
        )  # fmt: skip

    def reset(self, slots):
        """Nothing to reset: the recurrent baseline keeps no per-slot cursor."""
        check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=self.device)
