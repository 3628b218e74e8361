"""ModelRunner: the GPU side of the engine -- model, GDN state pool, KV cache, CUDA graphs.

It knows nothing about requests or text: it prefills a slot from token ids, runs one verify/decode
step for a batch of slots, and commits accepted counts. Verify/decode steps are captured in CUDA
graphs for a short list of batch sizes (the batch is padded with slot -1 rows up to the next size).
With a device drafter (``RunnerConfig(device_drafter="mtp")``), ``draft_and_verify`` drafts the
window inside the step, in the same graph as the verify (``engine.drafter.DeviceDrafter``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..models.model import HybridLM
from ..models.step import Step
from ..state import GDNStatePool, PoolConfig
from ..state.kv import KVCache
from ..state.lockstep import LockstepPool
from .mtp import MTPDrafter

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
    device_drafter: str | None = None  # "mtp": draft inside the step with the model's MTP head (window >= 2)


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
        self.drafter = None
        if cfg.device_drafter is not None:
            if cfg.device_drafter != "mtp":
                raise ValueError(f"device_drafter must be None or 'mtp', got {cfg.device_drafter!r}")
            self.drafter = MTPDrafter(model, num_slots=cfg.max_slots, max_len=cfg.max_len, window=cfg.window)
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
        hidden = self.model.hidden(t, step, self.pool, self.kv)
        if self.drafter is not None:
            self.drafter.prefill(slot, t, hidden)
        self.kv.commit(slots, torch.tensor([len(ids)], dtype=torch.int32, device=self.device))
        return self.model.lm_head(hidden[-1]).float()

    @torch.no_grad()
    def step(self, kind: str, slots: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """One verify (T = window) or decode (T = 1) step. tokens: [B, T] long. Returns logits [B, T, vocab] fp32.

        The state is not advanced until ``commit``.
        """
        return self._run(kind, slots, tokens, draft=False)[0]

    @torch.no_grad()
    def draft_and_verify(self, slots: list[int], last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One verify step whose T-1 drafts the device drafter writes inside the step. last: [B] long, each
        row's last emitted token. Returns logits [B, T, vocab] fp32 and the verified window [B, T] long."""
        if self.drafter is None:
            raise ValueError("draft_and_verify needs a device drafter: RunnerConfig(device_drafter='mtp')")
        return self._run("verify", slots, last.reshape(-1, 1), draft=True)

    def _forward(self, kind, slots, tokens, T, contiguous, draft):
        """Everything on the device (graph-capturable). tokens: [B, T], or [B, 1] when drafting."""
        step = Step.build(kind, slots, T, self.kv, contiguous=contiguous)
        window = torch.cat([tokens, self.drafter.propose(step, tokens[:, 0])], 1) if draft else tokens
        hidden = self.model.hidden(window.reshape(-1), step, self.pool, self.kv)
        if self.drafter is not None:
            self.drafter.observe(step, window, hidden)
        return self.model.lm_head(hidden).view(slots.shape[0], T, -1), window

    def _run(self, kind, slots, tokens, draft):
        B = tokens.shape[0]
        T = self.cfg.window if draft else tokens.shape[1]
        contiguous = slots == list(range(B))
        if not self.use_graphs:
            s = torch.tensor(slots, dtype=torch.int32, device=self.device)
            logits, window = self._forward(kind, s, tokens.to(self.device), T, contiguous, draft)
            return logits.float(), window
        Bg = self._padded(B)
        key = (kind, Bg, T, contiguous, draft)
        if key not in self._graphs:
            self._graphs[key] = self._capture(kind, Bg, T, contiguous, draft)
        graph, ids_buf, slots_buf, (logits, window) = self._graphs[key]
        ids_buf.zero_()
        ids_buf[:B].copy_(tokens)
        slots_buf.fill_(-1)
        slots_buf[:B].copy_(torch.tensor(slots, dtype=torch.int32))
        graph.replay()
        return logits[:B].float(), window[:B]

    def _capture(self, kind, B, T, contiguous, draft):
        ids_buf = torch.zeros(B, 1 if draft else T, dtype=torch.long, device=self.device)
        slots_buf = torch.full((B,), -1, dtype=torch.int32, device=self.device)

        def run():
            return self._forward(kind, slots_buf, ids_buf, T, contiguous, draft)

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
        if self.drafter is not None:
            self.drafter.commit(s, n)

    # ---- preemption ----
    def park(self, slot: int) -> tuple:
        """Copy a slot's whole state (GDN checkpoint + ring + cursors + conv, KV rows, drafter state) to the
        CPU and free the slot."""
        s = torch.tensor([slot], dtype=torch.int32, device=self.device)
        parked = (self.pool.offload(s), self.kv.gather(s), self.drafter.park(s) if self.drafter is not None else None)
        self.free(slot)
        return parked

    def unpark(self, parked: tuple) -> int:
        """Restore a ``park`` result into a newly allocated slot; returns the slot."""
        s = self.pool.restore(parked[0])
        self.kv.scatter(s, parked[1])
        if self.drafter is not None:
            self.drafter.unpark(s, parked[2])
        return int(s[0])
