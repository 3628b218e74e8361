"""ModelRunner: the GPU side of the engine -- model, GDN state pool, KV cache, CUDA graphs.

It knows nothing about requests or text: it prefills a slot from token ids, runs one verify/decode
step for a batch of slots, and commits accepted counts. Verify/decode steps are captured in CUDA
graphs for a short list of batch sizes (the batch is padded with slot -1 rows up to the next size).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..models.model import HybridLM
from ..models.step import Step
from ..state import GDNStatePool, PoolConfig
from ..state.kv import KVCache
from ..state.lockstep import LockstepPool

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class RunnerConfig:
    backend: str = "replay"
    max_slots: int = 16
    max_len: int = 1024
    window: int = 4  # T: last accepted token + drafts (1 = plain decode only)
    ring_len: int = 16
    cuda_graphs: bool = True
    validate: bool = True  # host-side protocol checks (turned off automatically for graph capture)
    shadow_backend: str | None = None  # a second pool fed the same inputs (LockstepPool), for bitwise checks


class ModelRunner:
    def __init__(self, model: HybridLM, cfg: RunnerConfig):
        self.model, self.cfg = model, cfg
        mc = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        ring = max(cfg.ring_len, 2 * cfg.window)
        use_graphs = cfg.cuda_graphs and self.device.type == "cuda" and mc.num_experts == 0
        self.use_graphs = use_graphs
        pool_cfg = PoolConfig(
            num_slots=cfg.max_slots, num_layers=len(mc.gdn_layers), H=mc.H, HV=mc.HV, K=mc.K, V=mc.V,
            window=cfg.window, ring_len=ring, backend=cfg.backend, dtype=self.dtype,
            conv_kernel=mc.conv_kernel, max_batch=self._padded(cfg.max_slots), device=self.device,
            validate=cfg.validate and not use_graphs,
        )  # fmt: skip
        self.pool = GDNStatePool(pool_cfg)
        if cfg.shadow_backend is not None:
            self.pool = LockstepPool(self.pool, GDNStatePool(replace(pool_cfg, backend=cfg.shadow_backend)))
        self.kv = KVCache(len(mc.attention_layers), cfg.max_slots, cfg.max_len, mc.num_kv_heads, mc.head_dim,
                          dtype=self.dtype, device=self.device)  # fmt: skip
        self._graphs: dict[tuple, tuple] = {}

    def _padded(self, n: int) -> int:
        return next((b for b in GRAPH_BATCH_SIZES if b >= n), n)

    # ---- slots ----
    def alloc(self) -> int:
        slot = self.pool.alloc(1)
        self.kv.reset(slot)
        return int(slot[0])

    def free(self, slot: int) -> None:
        self.pool.free(torch.tensor([slot], dtype=torch.int32, device=self.device))

    # ---- forward passes ----
    @torch.no_grad()
    def prefill(self, slot: int, ids: list[int]) -> torch.Tensor:
        """Run a whole prompt into a fresh slot; returns the logits of its last token [vocab] (fp32)."""
        if len(ids) + self.cfg.window > self.cfg.max_len:
            raise ValueError(
                f"prompt of {len(ids)} tokens + window {self.cfg.window} exceeds max_len {self.cfg.max_len}"
            )
        slots = torch.tensor([slot], dtype=torch.int32, device=self.device)
        t = torch.tensor(ids, dtype=torch.long, device=self.device)
        step = Step.build("prefill", slots, len(ids), self.kv)
        logits = self.model(t, step, self.pool, self.kv, last_only=True)
        self.kv.commit(slots, torch.tensor([len(ids)], dtype=torch.int32, device=self.device))
        return logits[0].float()

    @torch.no_grad()
    def step(self, kind: str, slots: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """One verify (T = window) or decode (T = 1) step. tokens: [B, T] long. Returns logits [B, T, vocab] fp32.

        The state is not advanced until ``commit``.
        """
        B, T = tokens.shape
        contiguous = slots == list(range(B))
        if not self.use_graphs:
            s = torch.tensor(slots, dtype=torch.int32, device=self.device)
            step = Step.build(kind, s, T, self.kv, contiguous=contiguous)
            return self.model(tokens.reshape(-1).to(self.device), step, self.pool, self.kv).view(B, T, -1).float()
        Bg = self._padded(B)
        key = (kind, Bg, T, contiguous)
        if key not in self._graphs:
            self._graphs[key] = self._capture(kind, Bg, T, contiguous)
        graph, ids_buf, slots_buf, out = self._graphs[key]
        ids_buf.zero_()
        ids_buf[:B].copy_(tokens)
        slots_buf.fill_(-1)
        slots_buf[:B].copy_(torch.tensor(slots, dtype=torch.int32))
        graph.replay()
        return out[:B].float()

    def _capture(self, kind, B, T, contiguous):
        ids_buf = torch.zeros(B, T, dtype=torch.long, device=self.device)
        slots_buf = torch.full((B,), -1, dtype=torch.int32, device=self.device)

        def run():
            step = Step.build(kind, slots_buf, T, self.kv, contiguous=contiguous)
            return self.model(ids_buf.view(-1), step, self.pool, self.kv).view(B, T, -1)

        # Warm-up (compiles kernels) on padding rows only: no state is touched.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            run()
            run()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = run()
        return g, ids_buf, slots_buf, out

    def commit(self, slots: list[int], num_accepted: list[int] | None, kind: str) -> None:
        s = torch.tensor(slots, dtype=torch.int32, device=self.device)
        n = torch.tensor(num_accepted if num_accepted is not None else [1] * len(slots), dtype=torch.int32)
        n = n.to(self.device)
        self.pool.commit(s, None if kind == "decode" else n)
        self.kv.commit(s, n)
