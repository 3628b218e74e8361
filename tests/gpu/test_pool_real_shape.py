"""Pool lifecycle at the Qwen3.5-122B TP1 GDN geometry: both backends in lockstep through prefill, verify/commit,
offload -> free -> restore, fork and flush; committed SSM and conv states bitwise equal after every step."""

import torch

from replayssm.state import GDNStatePool, PoolConfig
from tests.helpers.inputs import make_gdn_inputs

H, HV, K, V, T = 16, 64, 128, 128, 4
DT = torch.bfloat16


def test_pool_lifecycle_bitwise():
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = dict(num_slots=16, num_layers=2, H=H, HV=HV, K=K, V=V, window=T, ring_len=16, dtype=DT, device="cuda")
    pools = {b: GDNStatePool(PoolConfig(backend=b, **shape)) for b in ("replay", "recurrent")}
    C = pools["replay"].cfg.channels
    layers = [dict(A_log=torch.rand(HV, device="cuda", generator=gen) - 1,
                   dt_bias=torch.randn(HV, device="cuda", generator=gen),
                   weight=torch.randn(C, 4, device="cuda", generator=gen).to(DT)) for _ in range(2)]  # fmt: skip
    live = {b: p.alloc(8) for b, p in pools.items()}
    for layer in range(2):
        s0 = torch.randn(8, HV, V, K, device="cuda", generator=gen) * 0.05
        c0 = torch.randn(8, 3, C, device="cuda", generator=gen).to(DT)
        for b, p in pools.items():
            p.write_prefill(layer, live[b], s0, c0)
    cpu = torch.Generator().manual_seed(11)
    parked = None
    for step in range(60):
        lens = torch.randint(1, T + 1, (live["replay"].shape[0],), generator=cpu).tolist()
        x = make_gdn_inputs(lens, H, HV, K, V, dtype=DT, device="cuda", gen=gen)
        xc = torch.randn(sum(lens), C, device="cuda", generator=gen).to(DT)
        n = torch.tensor([int(torch.randint(1, m + 1, (1,), generator=cpu)) for m in lens], dtype=torch.int32).cuda()
        for b, p in pools.items():
            for layer, w in enumerate(layers):
                p.conv_update(layer, xc, weight=w["weight"], bias=None, slots=live[b], cu_seqlens=x["cu_seqlens"])
                p.verify(layer, x["q"], x["k"], x["v"], x["a"], x["b"], A_log=w["A_log"], dt_bias=w["dt_bias"],
                         slots=live[b], cu_seqlens=x["cu_seqlens"])  # fmt: skip
            p.commit(live[b], n)
        if step == 15:  # preempt three requests to the CPU
            parked = {b: p.offload(live[b][:3]) for b, p in pools.items()}
            for b, p in pools.items():
                p.free(live[b][:3])
                live[b] = live[b][3:]
        if step == 30:
            for b, p in pools.items():
                live[b] = torch.cat([live[b], p.restore(parked[b])])
        if step == 40:
            for b, p in pools.items():
                live[b] = torch.cat([live[b], p.fork(live[b][:2])])
                p.flush(live[b][2:5])
        assert torch.equal(live["replay"], live["recurrent"])
        for layer in range(2):
            a, b = (pools[k].committed_state(layer, live[k]) for k in ("replay", "recurrent"))
            assert torch.equal(a, b), f"step {step}, layer {layer}"
            a, b = (pools[k].committed_conv_state(layer, live[k]) for k in ("replay", "recurrent"))
            assert torch.equal(a, b), f"step {step}, layer {layer}: conv state"
