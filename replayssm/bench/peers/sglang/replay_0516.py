"""SGLang 0.5.16's ReplaySSM speculative verify (``--enable-gdn-replayssm-spec``), as its engine runs it.

Buffers (``mem_cache/memory_pool.py``): the pool ``temporal`` [layers, S+1, HV, V, K] fp32 is the
checkpoint; six ring caches per layer and slot, length ``L``: ``d`` (chunk update vectors) and
normalised ``k`` for the outputs, raw ``v`` / raw ``k`` / fp32 ``g`` / fp32 ``beta`` for the exact
fold (``d, k, rawv, rawk`` in the activation dtype). Cursors are per slot, shared by every layer and
*block-keyed* (indexed by the slot id): ``write_pos`` int32, ``cache_base`` int32, ``is_flush`` int8.

A step (``gdn_backend._replayssm_target_verify`` per layer, then ``spec_utils`` once):
``gdn_replayssm_spec_decode`` with ``max_cache_len = L``, ``max_spec_len = T``, ``scale = K**-0.5``,
qk l2-norm in kernel, ``null_block_id = -1`` and every launch parameter at its default (three
launches: exact fold of the flushing rows on the recurrent kernel's tile, verify of the other rows,
verify of the flushing rows from the folded checkpoint); then ``commit_gdn_replayssm_spec`` (one
single-program launch: flushing rows rotate ``cache_base`` by ``write_pos`` and restart at the
accepted count, others add it; ``is_flush = write_pos + 2T > L``). ``cache_buf_len`` is left at its
default (= L, the modulus of the base rotation).
"""

from __future__ import annotations

import torch

from .replay import SGLangReplayVerify


class ReplayVerify0516(SGLangReplayVerify):
    releases = ("0.5.16",)

    def __init__(self, case, kernels):
        super().__init__(case, kernels)
        geo, L, dt = self.geo, self.L, self.dtype
        self.temporal = self.state_pool()
        self.d, self.rawv = self.pool(geo.HV, L, geo.V, dtype=dt), self.pool(geo.HV, L, geo.V, dtype=dt)
        self.k, self.rawk = self.pool(geo.H, L, geo.K, dtype=dt), self.pool(geo.H, L, geo.K, dtype=dt)
        self.g, self.beta = self.pool(geo.HV, L, dtype=torch.float32), self.pool(geo.HV, L, dtype=torch.float32)
        self.write_pos, self.cache_base = self.cursor(torch.int32), self.cursor(torch.int32)
        self.is_flush = self.cursor(torch.int8)

    def verify(self, layer: int) -> None:
        x = self.x
        self.kernels.gdn_replayssm_spec_decode(
            q=x["q"], k=x["k"], v=x["v"], a=x["a"], b=x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
            checkpoint_state=self.temporal[layer], d_cache=self.d[layer], k_cache=self.k[layer],
            g_cache=self.g[layer], rawv_cache=self.rawv[layer], rawk_cache=self.rawk[layer],
            beta_cache=self.beta[layer], out=self.outputs[layer], query_start_loc=x["cu_seqlens"],
            ssm_state_indices=x["slots"], write_pos=self.write_pos, cache_base=self.cache_base,
            is_flush=self.is_flush, max_cache_len=self.L, max_spec_len=self.T, scale=self.scale,
            use_qk_l2norm_in_kernel=True, null_block_id=-1,
        )  # fmt: skip

    def commit(self) -> None:
        self.kernels.commit_gdn_replayssm_spec(
            write_pos=self.write_pos, cache_base=self.cache_base, is_flush=self.is_flush,
            num_accepted=self.case.accept(), state_batch_indices=self.x["slots"],
            max_cache_len=self.L, max_spec_len=self.T, null_block_id=-1,
        )  # fmt: skip

    def set_cursors(self, flush: bool) -> int:
        """As ours: no commit; every row folds L-T records per call (flush) or reads L-2T (non-flush)."""
        self.do_commit = False
        self.write_pos.fill_(self.L - self.T if flush else self.L - 2 * self.T)
        self.is_flush.fill_(int(flush))
        return self.L - self.T if flush else 0

    def committed(self, layer: int) -> torch.Tensor:
        """SGLang's own exact-fold launcher over each row's committed history, on scratch copies (what
        its next flush would write). Valid between steps."""
        slots, B = self.x["slots"], self.B
        idx = slots.long().clamp(min=0)
        h = self.temporal[layer][idx]
        rows = torch.arange(B, dtype=torch.int32, device=self.device)
        self.kernels.launch_gdn_exact_fold(
            checkpoint_state=h, rawv_cache=self.rawv[layer][idx], rawk_cache=self.rawk[layer][idx],
            g_cache=self.g[layer][idx], beta_cache=self.beta[layer][idx],
            query_start_loc=torch.zeros(B + 1, dtype=torch.int32, device=self.device),
            ssm_state_indices=torch.where(slots >= 0, rows, -1), write_pos=self.write_pos[idx],
            cache_base=self.cache_base[idx], is_flush=torch.ones(B, dtype=torch.int8, device=self.device),
            max_cache_len=self.L, use_qk_l2norm_in_kernel=True, null_block_id=-1, num_k_heads=self.geo.H,
        )  # fmt: skip
        return torch.where(self.live_rows(), h, 0.0)
