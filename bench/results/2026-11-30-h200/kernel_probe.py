"""GPU probe of the Gluon state kernels (dev tool, not part of the package).

Part A: correctness gates (bitwise committed state vs the baseline over chains at several geometries,
with random slot subsets, padding rows, retries of verify, random launch shapes per step; output
error vs the baseline and vs the PyTorch reference). Part B: timings per layer-step (CUDA graphs,
working set >= 1 GiB) of the baseline and ReplaySSM at several batches and launch shapes, pure
non-flush / pure flush / mixed, decode, and a pure streaming read in the tile layout. Prints a
table, writes JSON to $OUT/probe.json. Usage: python kernel_probe.py [quick]
"""

import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replayssm.ops import Ring, gdn_exact_fold, gdn_recurrent, gdn_replay_verify, launch, ring_commit  # noqa: E402
from replayssm.ops._gluon import gl, jit  # noqa: E402
from replayssm.ops._pinned import tile_layout, tile_rows  # noqa: E402
from replayssm.ops.snapshots import commit_snapshots  # noqa: E402
from replayssm.ops.verify import gdn_replay_verify_reference  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/probe_out")
os.makedirs(OUT, exist_ok=True)
RES = {"env": {}, "chains": [], "times": []}
DEV = os.environ.get("PROBE_DEVICE", "cuda")


def log(*a):
    print(*a, flush=True)


def save():
    with open(os.path.join(OUT, "probe.json"), "w") as f:
        json.dump(RES, f, indent=1)


def rel(x, r):
    x, r = x.float(), r.float()
    return float((x - r).norm() / r.norm().clamp_min(1e-30))


def inputs(lens, H, HV, K, V, dtype, gen):
    N = sum(lens)

    def r(*s):
        return torch.randn(*s, generator=gen, device=DEV).to(dtype)

    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lens).cumsum(0)
    return dict(q=r(N, H, K), k=r(N, H, K), v=r(N, HV, V), a=r(N, HV), b=r(N, HV), cu_seqlens=cu.to(DEV))


SHAPES = [
    launch.TileConfig(4, 1),
    launch.TileConfig(2, 1),
    launch.TileConfig(8, 1),
    launch.TileConfig(1, 1, 32),
    launch.TileConfig(4, 2),
    launch.TileConfig(2, 1, 64),
]


def _sync(tag):
    if os.environ.get("PROBE_SYNC"):
        torch.cuda.synchronize()
        log(f"    ok after {tag}")


def chain(name, S, H, HV, K, V, T, L, dtype, B, steps, ref_every=25, seed=0):
    t0 = time.time()
    gen = torch.Generator(device=DEV).manual_seed(seed)
    rng = torch.Generator().manual_seed(seed + 1)
    A_log = torch.rand(HV, generator=gen, device=DEV) * 2 - 1.5
    dt_bias = torch.randn(HV, generator=gen, device=DEV) * 0.5
    state = torch.randn(S, HV, V, K, generator=gen, device=DEV) * 0.2
    ckpt = state.clone()
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=dtype, device=DEV)
    worst = worst_ref = 0.0
    folds = retries = 0
    ok = True
    for step in range(steps):
        perm = torch.randperm(S, generator=rng).tolist()
        slots = perm[: int(torch.randint(1, B + 1, (1,), generator=rng))]
        if torch.rand(1, generator=rng) < 0.3:
            slots.insert(int(torch.randint(0, len(slots) + 1, (1,), generator=rng)), -1)
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in slots]
        x = inputs(lens, H, HV, K, V, dtype, gen)
        st = torch.tensor(slots, dtype=torch.int32, device=DEV)
        kw = dict(A_log=A_log, dt_bias=dt_bias, slots=st, cu_seqlens=x["cu_seqlens"])
        snaps = torch.full((len(lens), T, HV, V, K), float("nan"), device=DEV)
        o_base = gdn_recurrent(
            x["q"], x["k"], x["v"], x["a"], x["b"], state=state, snapshots=snaps, update_state=False, **kw
        )
        _sync("recurrent")
        live = [s for s in slots if s >= 0]
        folds += int(ring.cursors.flush[live].sum())
        if step % ref_every == 0:
            ck2, ring2 = ckpt.clone(), ring.clone()
            o_ref = gdn_replay_verify_reference(
                x["q"], x["k"], x["v"], x["a"], x["b"], checkpoint=ck2, ring=ring2, **kw
            )
        if os.environ.get("PROBE_SYNC"):
            torch.cuda.synchronize()
            log(f"  step {step}: verify {SHAPES[step % len(SHAPES)]} fold {SHAPES[(step + 3) % len(SHAPES)]}")
        with launch.override(verify=SHAPES[step % len(SHAPES)], fold=SHAPES[(step + 3) % len(SHAPES)]):
            o = gdn_replay_verify(x["q"], x["k"], x["v"], x["a"], x["b"], checkpoint=ckpt, ring=ring, **kw)
            _sync(f"verify B={len(slots)} lens={lens}")
            if step % 9 == 4:
                o = gdn_replay_verify(x["q"], x["k"], x["v"], x["a"], x["b"], checkpoint=ckpt, ring=ring, **kw)
                retries += 1
        if torch.isnan(o).any():
            ok = False
            log(f"  {name}: NaN in outputs at step {step}")
        worst = max(worst, rel(o, o_base))
        if step % ref_every == 0:
            worst_ref = max(worst_ref, rel(o, o_ref))
        n = [int(torch.randint(1, n_ + 1, (1,), generator=rng)) for n_ in lens]
        nt = torch.tensor(n, dtype=torch.int32, device=DEV)
        for i, s in enumerate(slots):
            if s >= 0:
                state[s] = snaps[i, n[i] - 1]
        ring_commit(ring, st, nt)
        _sync("commit")
        out = torch.full((S, HV, V, K), float("nan"), device=DEV)
        com = gdn_exact_fold(ckpt, ring, torch.arange(S, dtype=torch.int32, device=DEV), out=out)
        _sync("fold")
        if not torch.equal(com, state):
            bad = [s for s in range(S) if not torch.equal(com[s], state[s])]
            d = float((com - state).abs().max())
            log(f"  {name}: NOT BITWISE at step {step}: slots {bad[:8]}, max |diff| {d:.3e}")
            ok = False
            break
    row = dict(
        name=name,
        S=S,
        H=H,
        HV=HV,
        K=K,
        V=V,
        T=T,
        L=L,
        dtype=str(dtype),
        B=B,
        steps=step + 1,
        folds=folds,
        retries=retries,
        bitwise=ok,
        out_err_vs_baseline=worst,
        out_err_vs_reference=worst_ref,
        seconds=time.time() - t0,
    )
    RES["chains"].append(row)
    log(
        f"chain {name}: bitwise={ok} steps={step + 1} folds={folds} retries={retries} err_vs_base={worst:.2e} "
        f"err_vs_ref={worst_ref:.2e} ({time.time() - t0:.1f}s)"
    )
    save()
    return ok


# ---------------------------------------------------------------------------------------------- timing


def capture(fn, warm=2):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def time_graph(g, replays=20, trials=5):
    for _ in range(3):
        g.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(trials):
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / replays)
    return statistics.median(out)


def free():
    gc.collect()
    torch.cuda.empty_cache()


GEO = dict(H=16, HV=64, K=128, V=128)
STATE_BYTES = 64 * 128 * 128 * 4


def layers_for(B):
    return max(2, min(32, -(-(1 << 30) // (B * STATE_BYTES))))


def make_x(B, T, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x = inputs([T] * B, GEO["H"], GEO["HV"], GEO["K"], GEO["V"], dtype, gen)
    x["A_log"] = torch.rand(GEO["HV"], generator=gen, device=DEV) - 1.0
    x["dt_bias"] = torch.randn(GEO["HV"], generator=gen, device=DEV) * 0.5
    x["slots"] = torch.randperm(B, generator=gen, device=DEV).to(torch.int32)
    return x


def call(fn, x, **kw):
    return fn(
        x["q"],
        x["k"],
        x["v"],
        x["a"],
        x["b"],
        A_log=x["A_log"],
        dt_bias=x["dt_bias"],
        slots=x["slots"],
        cu_seqlens=x["cu_seqlens"],
        validate=False,
        **kw,
    )


def t_recurrent(B, T, decode=False):
    nl = layers_for(B)
    x = make_x(B, T)
    state = torch.randn(nl, B, GEO["HV"], GEO["V"], GEO["K"], device=DEV) * 0.05
    o = torch.empty_like(x["v"])
    if decode:

        def step():
            for i in range(nl):
                call(gdn_recurrent, x, state=state[i], out=o)
    else:
        snaps = torch.empty(nl, B, T, GEO["HV"], GEO["V"], GEO["K"], device=DEV)
        n = torch.randint(1, T + 1, (B,), device=DEV, dtype=torch.int32)

        def step():
            for i in range(nl):
                call(gdn_recurrent, x, state=state[i], snapshots=snaps[i], update_state=False, out=o)
            commit_snapshots(state, snaps, x["slots"], n, validate=False)

    t = time_graph(capture(step)) / nl * 1e6
    free()
    return t


def t_replay(B, T, L, mode, fixed_wp=None):
    """mode: 'random' / 'full' acceptance through the real protocol, or 'nonflush'/'flush' frozen cursors."""
    nl = layers_for(B)
    x = make_x(B, T)
    ckpt = torch.randn(nl, B, GEO["HV"], GEO["V"], GEO["K"], device=DEV) * 0.05
    rings = [Ring.allocate(B, GEO["H"], GEO["HV"], GEO["K"], GEO["V"], L=L, window=T, device=DEV)]
    for _ in range(nl - 1):
        rings.append(
            Ring.allocate(
                B, GEO["H"], GEO["HV"], GEO["K"], GEO["V"], L=L, window=T, device=DEV, cursors=rings[0].cursors
            )
        )
    c = rings[0].cursors
    o = torch.empty_like(x["v"])
    full = torch.full((B,), T, dtype=torch.int32, device=DEV)
    frozen = mode in ("nonflush", "flush")

    def step():
        for i in range(nl):
            call(gdn_replay_verify, x, checkpoint=ckpt[i], ring=rings[i], out=o)
        if frozen:
            c.epoch.add_(1)
        elif mode == "full":
            ring_commit(c, x["slots"], full, validate=False)
        else:
            ring_commit(c, x["slots"], torch.randint(1, T + 1, (B,), device=DEV, dtype=torch.int32), validate=False)

    for _ in range(L):  # fill the rings through the real protocol (full acceptance)
        for i in range(nl):
            call(gdn_replay_verify, x, checkpoint=ckpt[i], ring=rings[i], out=o)
        ring_commit(c, x["slots"], full, validate=False)
    if frozen:
        wp = fixed_wp if fixed_wp is not None else (L - T if mode == "flush" else L - 2 * T)
        c.write_pos.fill_(wp)
        c.flush.fill_(int(mode == "flush"))
    t = time_graph(capture(step)) / nl * 1e6
    free()
    return t


@jit
def _stream_kernel(src, dst, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr, TILE: tl.constexpr):
    i_v = gl.program_id(0)
    i_h = gl.program_id(1)
    rows0 = i_v * BVP + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
    cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)
    head = src + i_h.to(gl.int64) * V * K
    acc = gl.zeros([BV], gl.float32, layout=gl.SliceLayout(1, TILE))
    h_next = gl.load(head + gl.expand_dims(rows0, 1) * K + cols)
    for sb in gl.static_range(BVP // BV):
        tile = gl.expand_dims(rows0 + sb * BV, 1) * K + cols
        h = h_next
        if sb + 1 < BVP // BV:
            h_next = gl.load(head + tile + BV * K)
        acc += gl.sum(h, axis=1)
    gl.store(dst + (i_h * (V // BVP) + i_v) * BV + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE)), acc)


def t_stream(B, W, R, BVP):
    nl = layers_for(B)
    src = torch.randn(nl * B * GEO["HV"], GEO["V"], GEO["K"], device=DEV)
    BV = tile_rows(W, R)
    dst = torch.empty(src.shape[0] * (GEO["V"] // BVP) * BV, device=DEV)
    lay = tile_layout(W, R)

    def step():
        _stream_kernel[(GEO["V"] // BVP, src.shape[0])](src, dst, GEO["K"], GEO["V"], BV, BVP, lay, num_warps=W)

    t = time_graph(capture(step)) / nl * 1e6
    free()
    return t


def copy_bw():
    a = torch.empty(1 << 29, device=DEV).uniform_()
    b = torch.empty_like(a)
    t = time_graph(capture(lambda: b.copy_(a)))
    free()
    return 2 * (1 << 31) / t


def record(**row):
    RES["times"].append(row)
    save()
    log("  " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


def main():
    p = torch.cuda.get_device_properties(0)
    RES["env"] = dict(gpu=p.name, sms=p.multi_processor_count, torch=torch.__version__, triton=triton.__version__)
    log(RES["env"])
    ok = True
    ok &= chain("122B-T4-L16-bf16", 40, 16, 64, 128, 128, 4, 16, torch.bfloat16, 24, 80)
    ok &= chain("tiny-T4-L8-fp16", 6, 2, 4, 16, 16, 4, 8, torch.float16, 4, 150)
    ok &= chain("K64V128-T8-L16-bf16", 10, 4, 16, 64, 128, 8, 16, torch.bfloat16, 6, 60)
    ok &= chain("fp32-T3-L8-V64", 6, 2, 8, 32, 64, 3, 8, torch.float32, 4, 80)
    RES["all_bitwise"] = ok
    save()
    if not ok:
        log("correctness gate FAILED")
        return
    cfgs = [
        launch.TileConfig(4, 2, stages=2),
        launch.TileConfig(4, 1, stages=2),
        launch.TileConfig(4, 1, stages=4),
        launch.TileConfig(2, 2, stages=2),
    ]
    for cfg in cfgs:
        with launch.override(verify=cfg):
            for mode in ("nonflush", "random", "flush"):
                record(
                    kind="replay",
                    B=256,
                    T=4,
                    L=16,
                    mode=mode,
                    W=cfg.num_warps,
                    R=cfg.rows_per_thread,
                    S=cfg.stages,
                    us=t_replay(256, 4, 16, mode),
                )
    for B in (8, 64):
        for mode in ("random", "nonflush", "flush"):
            record(kind="replay", B=B, T=4, L=16, mode=mode, us=t_replay(B, 4, 16, mode))
    for cfg in [launch.TileConfig(4, 1, stages=2), launch.TileConfig(2, 1, stages=2)]:
        with launch.override(verify=cfg):
            record(kind="replay", B=8, T=4, L=16, mode="random", W=cfg.num_warps, R=1, us=t_replay(8, 4, 16, "random"))
    for T, L in ((2, 16), (8, 16), (8, 32)):
        record(kind="replay", B=256, T=T, L=L, mode="random", us=t_replay(256, T, L, "random"))
    for B in (8, 64, 256):
        record(kind="recurrent", B=B, T=4, us=t_recurrent(B, 4))
    record(kind="recurrent_decode", B=256, T=1, us=t_recurrent(256, 1, decode=True))
    with launch.override(recurrent=launch.TileConfig(4, 1)):
        record(kind="recurrent", B=256, T=4, R=1, us=t_recurrent(256, 4))
        record(kind="recurrent_decode", B=256, T=1, R=1, us=t_recurrent(256, 1, decode=True))
    os.environ["PROBE_SYNC"] = "1"
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    ok1 = chain("122B-T1-L32-bf16", 20, 16, 64, 128, 128, 1, 32, torch.bfloat16, 16, 24)
    if ok1:
        for L in (16, 32):
            record(kind="replay_decode", B=256, T=1, L=L, us=t_replay(256, 1, L, "full"))


if __name__ == "__main__":
    t0 = time.time()
    main()
    log(f"probe done in {time.time() - t0:.0f}s")
