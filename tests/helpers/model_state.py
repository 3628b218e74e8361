"""A model's own fp32 CPU state for tests that run it by hand: a GDN state pool and a KV cache."""

import torch

from replayssm.models.step import Step, StepKind
from replayssm.state import GDNStatePool, PoolConfig
from replayssm.state.kv import KVCache


def fresh_state(model, slots: int = 1, max_len: int = 256) -> tuple[GDNStatePool, KVCache]:
    """An empty GDN state pool and KV cache sized for ``model`` (fp32, CPU)."""
    c = model.config
    pool = GDNStatePool(PoolConfig(num_slots=slots, num_layers=len(c.gdn_layers), H=c.H, HV=c.HV, K=c.K, V=c.V,
                                   dtype=torch.float32))  # fmt: skip
    kv = KVCache(len(c.attention_layers), slots, max_len, c.num_kv_heads, c.head_dim, dtype=torch.float32,
                 device="cpu")  # fmt: skip
    return pool, kv


def prefill_logits(model, ids: torch.Tensor, max_len: int = 256) -> torch.Tensor:
    """Logits of one prompt ``ids`` [P] prefilled into a fresh slot."""
    pool, kv = fresh_state(model, 1, max_len)
    slot = pool.alloc(1)
    with torch.no_grad():
        return model(ids, Step.build(StepKind.PREFILL, slot, ids.shape[0], kv), pool, kv)
