"""SGLang 0.5.23's ReplaySSM speculative verify (``--enable-linear-replayssm-spec``), as its engine runs it.

Buffers (``mem_cache/memory_pool.py``, GDN): the pool ``temporal`` [layers, S+1, HV, V, K] fp32 is
the checkpoint, keyed by the slot (``ssm_state_indices``); the *compact* ring per layer, keyed by the
request (``replay_indices``; here the same id as the slot), length ``L``: ``d`` [HV, L, V] and
normalised ``k`` [H, L, K] in the activation dtype, ``g`` [HV, L] fp32, and, when the activation dtype
is not fp32, their low parts (``replayssm_rawv`` / ``replayssm_rawk``, same shapes and dtype: the
rounding residual of ``d`` and ``k``); no raw inputs and no ``beta``. Cursors per request, shared by
every layer: ``write_pos``, ``cache_base`` int32, ``is_flush`` int8 [S+1].

A step:

1. per layer (``gdn_backend._replayssm_target_verify``): ``gdn_replayssm_spec_decode`` with
   ``launch_mode="verify"`` (one launch: window outputs from checkpoint + history, the window's
   records written at ``write_pos``; nothing folds here), ``max_cache_len = L``, ``max_spec_len = T``,
   ``scale = K**-0.5``, qk l2-norm in kernel, ``null_block_id = -1``, other launch parameters at
   their defaults;
2. once (``spec_utils.commit_mamba_states_after_verify``): ``commit_gdn_replayssm_spec`` (cursor
   advance by the accepted count; ``fold_every_commit`` only for 16-bit checkpoints, so off), then
   ``commit_gdn_replayssm_circular`` over all layers in one launch: rows whose ``write_pos + 2T > L``
   fold their whole history into the checkpoint with tensor-core dots over the hi/lo parts (the
   "compact" commit: ~1e-4..1e-3 relative off the exact recurrence, not bitwise), then their ring
   restarts (``cache_base += write_pos``, ``write_pos = 0``). No prefix-cache tracking rows.

So a fold happens at the commit of the step that crosses the margin, not at the next verify, and
``is_flush`` is always 0 when a verify runs.
"""

from __future__ import annotations

import torch

from .replay import SGLangReplayVerify


class ReplayVerify0523(SGLangReplayVerify):
    releases = ("0.5.23",)

    def __init__(self, case, kernels):
        super().__init__(case, kernels)
        geo, L, dt = self.geo, self.L, self.dtype
        self.temporal = self.state_pool()
        self.d, self.k = self.pool(geo.HV, L, geo.V, dtype=dt), self.pool(geo.H, L, geo.K, dtype=dt)
        self.g = self.pool(geo.HV, L, dtype=torch.float32)
        compact_lo = dt != torch.float32
        self.d_lo = self.pool(geo.HV, L, geo.V, dtype=dt) if compact_lo else None
        self.k_lo = self.pool(geo.H, L, geo.K, dtype=dt) if compact_lo else None
        self.write_pos, self.cache_base = self.cursor(torch.int32), self.cursor(torch.int32)
        self.is_flush = self.cursor(torch.int8)
        self.frozen = None  # cursors restored before every call of a frozen flush step
        self.full = torch.full((self.B,), self.T, dtype=torch.int32, device=self.device)

    def verify(self, layer: int) -> None:
        x = self.x
        self.kernels.gdn_replayssm_spec_decode(
            q=x["q"], k=x["k"], v=x["v"], a=x["a"], b=x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
            checkpoint_state=self.temporal[layer], d_cache=self.d[layer], k_cache=self.k[layer],
            g_cache=self.g[layer], rawv_cache=_layer(self.d_lo, layer), rawk_cache=_layer(self.k_lo, layer),
            beta_cache=None, out=self.outputs[layer], query_start_loc=x["cu_seqlens"],
            ssm_state_indices=x["slots"], replay_indices=x["slots"], write_pos=self.write_pos,
            cache_base=self.cache_base, is_flush=self.is_flush, max_cache_len=self.L, max_spec_len=self.T,
            scale=self.scale, use_qk_l2norm_in_kernel=True, null_block_id=-1, launch_mode="verify",
        )  # fmt: skip

    def commit(self) -> None:
        slots = self.x["slots"]
        accepted = self.full if self.frozen is not None else self.case.accept()
        self.kernels.commit_gdn_replayssm_spec(
            write_pos=self.write_pos, cache_base=self.cache_base, is_flush=self.is_flush, num_accepted=accepted,
            replay_indices=slots, max_cache_len=self.L, max_spec_len=self.T,
            fold_every_commit=self.temporal.dtype != torch.float32, null_block_id=-1,
        )  # fmt: skip
        self._fold(self.temporal, self.d, self.k, self.g, self.d_lo, self.k_lo, slots, slots,
                   self.write_pos, self.cache_base, self.is_flush, accepted)  # fmt: skip

    def _fold(self, temporal, d, k, g, d_lo, k_lo, state_idx, replay_idx, write_pos, cache_base, is_flush, accepted):
        self.kernels.commit_gdn_replayssm_circular(
            checkpoint_state=temporal, d_cache=d, k_cache=k, g_cache=g, d_residual_cache=d_lo,
            k_residual_cache=k_lo, state_batch_indices=state_idx, replay_indices=replay_idx,
            write_pos=write_pos, cache_base=cache_base, is_flush=is_flush, accept_lens=accepted,
            mamba_track_indices=None, mamba_steps_to_track=None, null_block_id=-1,
        )  # fmt: skip

    def __call__(self) -> None:
        if self.frozen is not None:
            for cursor, saved in zip((self.write_pos, self.cache_base, self.is_flush), self.frozen):
                cursor.copy_(saved)
        super().__call__()

    def set_cursors(self, flush: bool) -> int:
        """Non-flush: a verify over L-2T history records, no commit. Flush: the same verify, then the
        commit of T accepted tokens, whose fold takes L-T records; the cursors are restored before
        every call (three small copies), so every call folds."""
        self.write_pos.fill_(self.L - 2 * self.T)
        self.is_flush.zero_()
        if not flush:
            self.do_commit, self.frozen = False, None
            return 0
        self.do_commit = True
        self.frozen = (self.write_pos.clone(), self.cache_base.clone(), self.is_flush.clone())
        return self.L - self.T

    def committed(self, layer: int) -> torch.Tensor:
        """The compact fold of each row's history on scratch copies (what its next fold would write).
        Valid between steps."""
        slots, B = self.x["slots"], self.B
        idx = slots.long().clamp(min=0)
        rows = torch.arange(B, dtype=torch.int32, device=self.device)

        def one(t):
            return None if t is None else t[layer][idx].unsqueeze(0)  # [1 layer, B, ...]

        h = one(self.temporal)
        self._fold(h, one(self.d), one(self.k), one(self.g), one(self.d_lo), one(self.k_lo),
                   torch.where(slots >= 0, rows, -1), rows, self.write_pos[idx].clone(), self.cache_base[idx].clone(),
                   torch.ones(B, dtype=torch.int8, device=self.device),
                   torch.zeros(B, dtype=torch.int32, device=self.device))  # fmt: skip
        return torch.where(self.live_rows(), h[0], 0.0)


def _layer(t, layer):
    return None if t is None else t[layer]
