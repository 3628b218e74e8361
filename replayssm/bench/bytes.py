"""Byte model of one engine step, its floor, and the bound it puts on replay over recurrent.

A step of B requests with window T moves at least: the weights it uses (dense: every matrix but the
embedding, which is only gathered; MoE: the shared part plus the experts the batch's tokens reach, in
expectation under uniform routing), the KV entries every row reads and writes, the GDN state traffic of its
backend per request and GDN layer (S = HV*V*K*4 bytes):

- plain decode (recurrent backend, T = 1): read and write the state, 2 S;
- recurrent speculative: read the state, write T snapshots, copy the accepted one back, (3 + T) S;
- replay speculative: read the checkpoint, and at the protocol's fold rate read and write it, (1 + 2 rate) S;

and the logits (written by the LM head, read by the acceptance). Ring records, activations and the conv state
are not counted (a few percent at most), so the floor is a lower bound. The compute floor is 2 flops per
active weight per token. ``floor_ms`` is the larger of bytes / bandwidth and flops / GEMM rate, both
measured on the machine; the byte-model bound of replay over recurrent is the ratio of their byte floors.

``serial_ms`` is the floor of a step whose kernels run one after another, as this engine's do (and as a two-stream
probe found they must in practice, bench/NOTES.md, thirtieth session): the weight GEMMs at the larger of their bytes
and their flops, then everything else (KV, GDN state, logits) at the bandwidth. Where the GEMMs are bound by their
bytes it equals the byte floor; where they are compute-bound (27B at 256 rows: C=64, T=4) it is the higher, truer
floor, and the ratio of two backends' serial floors is the bound their ratio can reach in a serial step.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass

import torch

from ..models.config import ModelConfig
from ..models.layers import Experts
from ..ops.ring import check_ring_geometry
from .floor import protocol_fold_rate


@dataclass(frozen=True)
class ModelBytes:
    """What a step's weight traffic depends on: dense bytes read per step, and the routed experts."""

    dense: int  # bytes of every weight a step reads in full (all but the embedding and the routed experts)
    expert: int  # bytes of one routed expert of one layer (0 for dense models)
    moe_layers: int
    num_experts: int
    top_k: int
    act_bytes: int  # bytes per activation element (KV cache, logits)

    @classmethod
    def of(cls, model) -> ModelBytes:
        mc: ModelConfig = model.config
        experts = [m for m in model.modules() if isinstance(m, Experts)]
        routed = sum(p.numel() * p.element_size() for m in experts for p in m.parameters())
        embed = model.model.embed_tokens.weight
        total = sum(p.numel() * p.element_size() for p in model.parameters())  # a tied head is counted once
        dense = total - routed - (0 if mc.tie_word_embeddings else embed.numel() * embed.element_size())
        E = mc.num_experts
        return cls(dense, routed // (len(experts) * E) if experts else 0, len(experts), E, mc.top_k,
                   embed.element_size())  # fmt: skip

    def weights(self, tokens: int) -> float:
        """Weight bytes a step of ``tokens`` tokens reads (expected number of distinct experts per layer)."""
        if not self.moe_layers:
            return float(self.dense)
        hit = self.num_experts * (1.0 - (1.0 - self.top_k / self.num_experts) ** tokens)
        return self.dense + self.moe_layers * hit * self.expert

    def flops(self, tokens: int) -> float:
        return 2.0 * tokens * (self.dense + self.moe_layers * self.top_k * self.expert) / self.act_bytes


def fold_rate_at_mean(T: int, L: int, mean_accepted: float, steps: int = 20000, seed: int = 0) -> float:
    """``floor.protocol_fold_rate`` when every step accepts floor(mean) or ceil(mean) tokens, mixed to the mean
    (``BenchmarkAcceptance``); ``mean_accepted`` in [1, T]."""
    check_ring_geometry(L, T)
    if isinstance(mean_accepted, bool) or not isinstance(mean_accepted, (int, float)) or not 1 <= mean_accepted <= T:
        raise ValueError(f"mean_accepted must be a number in [1, T={T}], got {mean_accepted!r}")
    rng = random.Random(seed)
    lo, frac = int(mean_accepted), mean_accepted - int(mean_accepted)
    return protocol_fold_rate(T, L, lambda: min(T, lo + (rng.random() < frac)), steps)


STEP_MODES = ("plain", "recurrent", "replay", "replay-mtp")


@dataclass(frozen=True)
class StepBytes:
    weights: float
    kv: float
    gdn_state: float
    logits: float
    flops: float

    @property
    def total(self) -> float:
        return self.weights + self.kv + self.gdn_state + self.logits

    def floor_ms(self, bandwidth: float, flop_rate: float) -> tuple[float, str]:
        """(floor in ms, "bytes" or "flops": which one binds) at the measured bandwidth and GEMM rate."""
        b, f = self.total / bandwidth * 1e3, self.flops / flop_rate * 1e3
        return (b, "bytes") if b >= f else (f, "flops")

    def serial_ms(self, bandwidth: float, flop_rate: float) -> float:
        """The serial floor in ms (module docstring): the GEMMs at their own roof, then the other bytes."""
        gemm = max(self.weights / bandwidth, self.flops / flop_rate)
        serial = (gemm + (self.kv + self.gdn_state + self.logits) / bandwidth) * 1e3
        return max(serial, self.floor_ms(bandwidth, flop_rate)[0])  # (never below it: only rounding could put it so)

    def as_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def step_bytes(mb: ModelBytes, mc: ModelConfig, mode: str, C: int, T: int, context: float, *,
               ring_len: int, mean_accepted: float) -> StepBytes:  # fmt: skip
    """Bytes (and flops) of one step of ``mode`` ("plain", "recurrent", "replay"; "replay-mtp" counts as replay)
    for C requests holding ``context`` committed tokens each."""
    if mode not in STEP_MODES:
        raise ValueError(f"mode must be one of {STEP_MODES}, got {mode!r}")
    if not (isinstance(C, int) and isinstance(T, int)) or isinstance(C, bool) or C < 1 or T < 1 or context < 0:
        raise ValueError(f"C and T must be ints >= 1 and context >= 0, got C={C!r}, T={T!r}, context={context!r}")
    N = C * T
    kv_token = 2 * mc.num_kv_heads * mc.head_dim * mb.act_bytes * len(mc.attention_layers)
    kv = C * (context + T) * kv_token + N * kv_token  # read everything held (window included), write the window
    S = mc.gdn_shape.state_bytes
    if mode == "plain":
        per = 2 * S
    elif mode == "recurrent":
        per = (3 + T) * S
    else:
        per = (1 + 2 * fold_rate_at_mean(T, ring_len, mean_accepted)) * S
    gdn = C * len(mc.gdn_layers) * per
    logits = 2 * N * mc.vocab_size * mb.act_bytes
    return StepBytes(mb.weights(N), kv, gdn, logits, mb.flops(N))


def gemm_rate(device="cuda", dtype=torch.bfloat16, m: int = 4096, n: int = 8192, k: int = 8192) -> float:
    """Achieved flops/s of a large GEMM in the model's dtype (the compute roof of the floor); on the CPU (smoke
    runs) a small fp32 one, timed by the wall clock."""
    if torch.device(device).type != "cuda":
        a = torch.randn(256, 256)
        t0 = time.perf_counter()
        for _ in range(10):
            a @ a
        return 2.0 * 256**3 * 10 / (time.perf_counter() - t0)
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    end.synchronize()
    return 2.0 * m * n * k * 10 / (start.elapsed_time(end) / 1e3)
