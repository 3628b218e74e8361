"""GPU correctness checks at real shapes (issue: GDN kernel library; pool lifecycle).

Qwen3.5-122B TP1 GDN geometry (H=16, HV=64, K=V=128), bf16 activations, fp32 checkpoint:
  1. kernels vs their PyTorch references on one call (varlen windows, padding, flushing rows);
  2. 1,000-step verify -> commit chains (B=64, T=4, L=16, random acceptance, varlen, padding) with
     dot_precision "tf32" and "ieee": the ReplaySSM committed state must be torch.equal to the
     recurrent baseline's after every step; output errors are reported vs the baseline and, for the
     first steps, vs a float64 recurrence;
  3. a pool lifecycle chain (2 layers, both backends in lockstep: alloc, prefill, verify/commit,
     offload -> free -> restore, fork, flush, free) with bitwise committed states.
Usage: python scripts/gpu_checks.py OUT_DIR [--steps 1000]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replayssm.bench.report import environment, header  # noqa: E402
from replayssm.ops import (  # noqa: E402
    Ring,
    gdn_exact_fold,
    gdn_recurrent,
    gdn_recurrent_reference,
    gdn_replay_verify,
    gdn_replay_verify_reference,
    ring_commit,
)  # fmt: skip
from replayssm.state import GDNStatePool, PoolConfig  # noqa: E402
from tests.ops.gdn64 import run64  # noqa: E402

H, HV, K, V = 16, 64, 128, 128
DT = torch.bfloat16


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()


def inputs(lens, gen):
    N = sum(lens)
    r = lambda *s: torch.randn(*s, device="cuda", generator=gen).to(DT)  # noqa: E731
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32, device="cuda")
    cu[1:] = torch.tensor(lens, device="cuda").cumsum(0)
    return dict(q=r(N, H, K), k=r(N, H, K), v=r(N, HV, V), a=r(N, HV), b=r(N, HV), cu_seqlens=cu)


def call(fn, x, params, **kw):
    return fn(x["q"], x["k"], x["v"], x["a"], x["b"], cu_seqlens=x["cu_seqlens"], **params, **kw)


def check_single_calls(gen):
    B, T, L, S = 12, 4, 16, 16
    params = dict(A_log=torch.rand(HV, device="cuda", generator=gen) - 1, dt_bias=torch.randn(HV, device="cuda"))
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=DT, device="cuda")
    ckpt = torch.randn(S, HV, V, K, device="cuda", generator=gen) * 0.05
    slots = torch.randperm(S, device="cuda", generator=gen)[:B].to(torch.int32)
    for _ in range(3):  # build history
        x = inputs([T] * B, gen)
        call(gdn_replay_verify, x, params, checkpoint=ckpt, ring=ring, slots=slots)
        ring_commit(ring, slots, torch.randint(1, T + 1, (B,), device="cuda", generator=gen, dtype=torch.int32))
    ring.cursors.flush[slots[:4].long()] = 1  # a mix of folding and reconstructing rows
    lens = torch.randint(1, T + 1, (B,), generator=torch.Generator().manual_seed(3)).tolist()
    x = inputs(lens, gen)
    sl = slots.clone()
    sl[5] = -1
    out = {}
    for name, fn in (("triton", gdn_replay_verify), ("reference", gdn_replay_verify_reference)):
        c, rg = ckpt.clone(), ring.clone(cursors=ring.cursors)
        kw = {"impl": "triton"} if name == "triton" else {}
        out[name] = (call(fn, x, params, checkpoint=c, ring=rg, slots=sl, **kw), c, rg)
    (o, c, rg), (o_r, c_r, rg_r) = out["triton"], out["reference"]
    st = torch.randn(S, HV, V, K, device="cuda", generator=gen) * 0.05
    s1, s2 = st.clone(), st.clone()
    snaps = [torch.full((B, T, HV, V, K), float("nan"), device="cuda") for _ in range(2)]
    o_rec = call(gdn_recurrent, x, params, state=s1, slots=sl, snapshots=snaps[0], impl="triton")
    o_rec_ref = call(gdn_recurrent_reference, x, params, state=s2, slots=sl, snapshots=snaps[1])
    return {
        "verify_out_rel_err_vs_reference": rel(o, o_r),
        "verify_checkpoint_rel_err_vs_reference": rel(c, c_r),
        "verify_u_rel_err_vs_reference": rel(rg.u.nan_to_num(), rg_r.u.nan_to_num()),
        "verify_raw_records_bitwise": torch.equal(rg.k.nan_to_num(), rg_r.k.nan_to_num())
        and torch.equal(rg.v.nan_to_num(), rg_r.v.nan_to_num()),
        "recurrent_out_rel_err_vs_reference": rel(o_rec, o_rec_ref),
        "recurrent_state_rel_err_vs_reference": rel(s1, s2),
        "padding_rows_zero": bool((o[sum(lens[:5]) : sum(lens[:6])] == 0).all()),
    }


def chain(steps, dot_precision, gen, B=64, T=4, L=16, S=80, f64_steps=20):
    params = dict(A_log=torch.rand(HV, device="cuda", generator=gen) - 1, dt_bias=torch.randn(HV, device="cuda"))
    state = torch.randn(S, HV, V, K, device="cuda", generator=gen) * 0.05
    ckpt = state.clone()
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=DT, device="cuda")
    slots = torch.randperm(S, device="cuda", generator=gen)[:B].to(torch.int32)
    cpu = torch.Generator().manual_seed(7)
    snaps = torch.empty(B, T, HV, V, K, device="cuda")
    out_buf = torch.empty(B, HV, V, K, device="cuda")
    worst, errs, f64_errs, bitwise_steps, folds, t0 = 0.0, [], [], 0, 0, time.time()
    ref64 = {i: state[int(s)].double() for i, s in enumerate(slots.tolist()[:2])}
    for step in range(steps):
        lens = torch.randint(1, T + 1, (B,), generator=cpu).tolist()
        sl = slots.clone()
        pad = int(torch.randint(0, B, (1,), generator=cpu))
        sl[pad] = -1
        x = inputs(lens, gen)
        folds += int(ring.cursors.flush[sl[sl >= 0].long()].sum())
        o_base = call(gdn_recurrent, x, params, state=state, slots=sl, snapshots=snaps, update_state=False)
        o = call(gdn_replay_verify, x, params, checkpoint=ckpt, ring=ring, slots=sl, dot_precision=dot_precision)
        e = rel(o, o_base)
        errs.append(e)
        worst = max(worst, e)
        n = torch.tensor([int(torch.randint(1, m + 1, (1,), generator=cpu)) for m in lens], dtype=torch.int32)
        n = n.cuda()
        live = (sl >= 0).nonzero().flatten()
        state[sl[live].long()] = snaps[live, n[live].long() - 1]
        if step < f64_steps:  # float64 recurrence of two rows from their committed states
            cu = x["cu_seqlens"].tolist()
            for i in ref64:
                if i == pad:
                    continue
                t = slice(cu[i], cu[i + 1])
                o64, st64 = run64(ref64[i], *(x[c][t] for c in "qkvab"), params["A_log"], params["dt_bias"])
                f64_errs.append({"replay": rel(o[t], o64), "recurrent": rel(o_base[t], o64)})
                ref64[i] = st64[int(n[i]) - 1]
        ring_commit(ring, sl, n)
        gdn_exact_fold(ckpt, ring, slots, out=out_buf)
        bitwise_steps += int(torch.equal(out_buf, state[slots.long()]))
    return {
        "steps": steps, "dot_precision": dot_precision, "B": B, "T": T, "L": L, "folds": folds,
        "bitwise_steps": bitwise_steps, "max_out_rel_err_vs_recurrent": worst,
        "median_out_rel_err_vs_recurrent": sorted(errs)[len(errs) // 2],
        "max_out_rel_err_vs_float64": {k: max(d[k] for d in f64_errs) for k in ("replay", "recurrent")},
        "seconds": time.time() - t0,
    }  # fmt: skip


def pool_lifecycle(gen, steps=60):
    geo = dict(num_slots=16, num_layers=2, H=H, HV=HV, K=K, V=V, window=4, ring_len=16, dtype=DT, device="cuda")
    pools = {b: GDNStatePool(PoolConfig(backend=b, **geo)) for b in ("replay", "recurrent")}
    C = pools["replay"].cfg.channels
    layers = [dict(A_log=torch.rand(HV, device="cuda") - 1, dt_bias=torch.randn(HV, device="cuda"),
                   weight=torch.randn(C, 4, device="cuda").to(DT), bias=None) for _ in range(2)]  # fmt: skip
    live = {b: p.alloc(8) for b, p in pools.items()}
    for layer in range(2):
        s0 = torch.randn(8, HV, V, K, device="cuda", generator=gen) * 0.05
        c0 = torch.randn(8, 3, C, device="cuda", generator=gen).to(DT)
        for b, p in pools.items():
            p.write_prefill(layer, live[b], s0, c0)
    cpu = torch.Generator().manual_seed(11)
    bitwise, events, parked = 0, [], None
    for step in range(steps):
        B = live["replay"].shape[0]
        lens = torch.randint(1, 5, (B,), generator=cpu).tolist()
        x = inputs(lens, gen)
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
            events.append("offload+free 3")
        if step == 30:
            for b, p in pools.items():
                live[b] = torch.cat([live[b], p.restore(parked[b])])
            events.append("restore 3")
        if step == 40:
            for b, p in pools.items():
                live[b] = torch.cat([live[b], p.fork(live[b][:2])])
                p.flush(live[b][2:5])
            events.append("fork 2 + flush 3")
        ok = all(
            torch.equal(pools["replay"].committed_state(layer, live["replay"]),
                        pools["recurrent"].committed_state(layer, live["recurrent"]))
            and torch.equal(pools["replay"].conv_state[layer], pools["recurrent"].conv_state[layer])
            for layer in range(2)
        )  # fmt: skip
        bitwise += int(ok)
    return {"steps": steps, "bitwise_steps": bitwise, "events": events,
            "memory": {b: p.memory_report() for b, p in pools.items()}}  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()
    env = environment()
    print(header(env), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    res = {"env": env, "single_calls": check_single_calls(gen)}
    print(json.dumps(res["single_calls"], indent=1), flush=True)
    res["chains"] = []
    for prec in ("tf32", "ieee"):
        r = chain(args.steps, prec, gen)
        res["chains"].append(r)
        print(json.dumps(r), flush=True)
    res["pool_lifecycle"] = pool_lifecycle(gen)
    print(json.dumps(res["pool_lifecycle"]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_checks.json").write_text(json.dumps(res, indent=2))
    ok = all(c["bitwise_steps"] == c["steps"] for c in res["chains"])
    ok &= res["pool_lifecycle"]["bitwise_steps"] == res["pool_lifecycle"]["steps"]
    print("ALL BITWISE" if ok else "BITWISE FAILURES", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
