"""SGLang 0.5.16 peers (kernels loaded from the wheel) against our reference backend, on tiny shapes.

On a machine without a GPU the SGLang kernels run in the Triton interpreter, so TRITON_INTERPRET
must be set before ``load_sglang_kernels`` creates them (it is set here, not on GPU machines, where
setting it would turn every kernel of the session into an interpreted one). The whole module is
skipped when the wheel is not at ``$REPLAYSSM_SGLANG_WHEEL`` or the default path.

Smallest shapes SGLang's kernels accept: K >= 32 (both ReplaySSM kernels split K into ``nk=2``
tiles that must be >= 16 wide for ``tl.dot``), any V, T and L (the verify pads the window to
``BS >= 4`` and the history to ``BC >= 16``).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import zipfile  # noqa: E402

import pytest  # noqa: E402

from replayssm.bench.sglang_decode_peer import SGLangRingDecodePeer  # noqa: E402
from replayssm.bench.sglang_peer import SGLangRecurrentPeer, SGLangReplayPeer  # noqa: E402
from replayssm.bench.sglang_wheel import (  # noqa: E402
    SGLANG_VERSION,
    WHEEL_ENV,
    SGLangWheelError,
    default_wheel_path,
    load_sglang_kernels,
)
from replayssm.ops import Ring, gdn_exact_fold, gdn_recurrent, gdn_replay_verify, ring_commit  # noqa: E402

WHEEL = default_wheel_path()
if not os.path.isfile(WHEEL):
    pytest.skip(f"sglang=={SGLANG_VERSION} wheel not found at {WHEEL} (set ${WHEEL_ENV})", allow_module_level=True)

H, HV, K, V = 2, 4, 32, 32
S = 3  # slots
STEPS = 20
REF = "reference"

# Relative bounds, max|x - ref| / max|ref| over the live rows. Outputs: fp32 activations agree to
# rounding on the CPU (the interpreter has no tf32), the GPU's tf32 tensor-core dots in SGLang's
# chunked verify cost ~1e-3; fp16 outputs are rounded to fp16 (2^-11 relative) by every side.
# Committed states never go through tf32 or the fp16 output cast: all sides run the same fp32
# recurrent update, differing only in reduction order.
OUT_BOUND = {torch.float32: 1e-4, torch.float16: 2e-3}
OUT_BOUND_GPU_TF32 = 5e-3
STATE_BOUND = 1e-5


@pytest.fixture(scope="module")
def kernels():
    try:
        return load_sglang_kernels(WHEEL)
    except SGLangWheelError as e:
        pytest.skip(str(e))


def rel(x, ref):
    return ((x.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30)).item()


def rand(gen, *shape, dtype, device, s=1.0):
    return (torch.randn(*shape, generator=gen) * s).to(dtype).to(device)


def pick_rows(gen, device):
    """A random subset of the slots in random order, sometimes with a padding row (-1)."""
    perm = torch.randperm(S, generator=gen).tolist()
    live = perm[: int(torch.randint(2, S + 1, (1,), generator=gen))]
    rows = list(live)
    if torch.rand(1, generator=gen).item() < 0.5:
        rows.insert(int(torch.randint(0, len(rows) + 1, (1,), generator=gen)), -1)
    return rows, torch.tensor(rows, dtype=torch.int32, device=device)


def out_bound(dtype, device):
    if dtype == torch.float32 and device.type == "cuda":
        return OUT_BOUND_GPU_TF32
    return OUT_BOUND[dtype]


# --- loading -------------------------------------------------------------------------------------


def test_load_rejects_missing_wheel(tmp_path):
    with pytest.raises(SGLangWheelError, match="not found"):
        load_sglang_kernels(tmp_path / "nope.whl")


def test_load_rejects_other_version(tmp_path):
    fake = tmp_path / "sglang-0.5.15-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("sglang-0.5.15.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.15\n\n")
    with pytest.raises(SGLangWheelError, match="0.5.15"):
        load_sglang_kernels(fake)


def test_load_rejects_incomplete_wheel(tmp_path):
    fake = tmp_path / "sglang-0.5.16-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("sglang-0.5.16.dist-info/METADATA", "Name: sglang\nVersion: 0.5.16\n\n")
    with pytest.raises(SGLangWheelError, match="has no sglang/kernels"):
        load_sglang_kernels(fake)


def test_load(kernels):
    assert kernels.version == SGLANG_VERSION
    assert load_sglang_kernels(WHEEL) is kernels  # cached
    for name in ("gdn_replayssm_spec_decode", "commit_gdn_replayssm_spec", "fused_sigmoid_gating_delta_rule_update"):
        assert callable(getattr(kernels, name))


# --- speculative verify -> commit chains ---------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, T, L, scatter",
    [
        (torch.float32, 3, 8, "sglang"),  # flush once write_pos > 2; T=3 pads SGLang's window lanes (BS=4)
        (torch.float16, 4, 16, "torch"),  # flush once write_pos > 8
    ],
)
def test_spec_chain(kernels, device, dtype, T, L, scatter):
    gen = torch.Generator().manual_seed(1000 + T + L)
    cpu = torch.device("cpu")
    B_max = S + 1
    A_log = torch.rand(HV, generator=gen) * 2 - 1.5
    dt_bias = torch.randn(HV, generator=gen) * 0.5
    state0 = torch.randn(S, HV, V, K, generator=gen) * 0.2

    # ours (reference backend, always on the CPU): recurrent baseline state, ReplaySSM checkpoint + ring
    state = state0.clone()
    checkpoint = state0.clone()
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=dtype, device=cpu)
    # SGLang, on `device`
    rec = SGLangRecurrentPeer(S, H, HV, K, V, T=T, max_batch=B_max, dtype=dtype, device=device, kernels=kernels,
                              scatter=scatter)  # fmt: skip
    rep = SGLangReplayPeer(S, H, HV, K, V, T=T, L=L, dtype=dtype, device=device, kernels=kernels)
    rec.state.copy_(state0)
    rep.checkpoint.copy_(state0)
    params = (A_log.to(device), dt_bias.to(device))

    err = dict(rec_out=0.0, rep_out=0.0, rep_vs_ours_out=0.0, rec_state=0.0, rep_state=0.0, flush_ckpt=0.0)
    flushes = 0
    for _ in range(STEPS):
        rows, slots = pick_rows(gen, cpu)
        B = len(rows)
        N = B * T
        cu = torch.arange(0, N + 1, T, dtype=torch.int32)
        x = (rand(gen, N, H, K, dtype=dtype, device=cpu), rand(gen, N, H, K, dtype=dtype, device=cpu),
             rand(gen, N, HV, V, dtype=dtype, device=cpu), rand(gen, N, HV, dtype=dtype, device=cpu),
             rand(gen, N, HV, dtype=dtype, device=cpu))  # fmt: skip
        xd = [t.to(device) for t in x]
        slots_d, cu_d = slots.to(device), cu.to(device)
        kw = dict(A_log=A_log, dt_bias=dt_bias, slots=slots, cu_seqlens=cu, impl=REF)
        live = [s for s in rows if s >= 0]
        live_rows = [i for i, s in enumerate(rows) if s >= 0]
        pad_rows = [i for i, s in enumerate(rows) if s < 0]
        tok = [t for i in live_rows for t in range(i * T, (i + 1) * T)]
        pad_tok = [t for i in pad_rows for t in range(i * T, (i + 1) * T)]
        flushing = [s for s in live if int(rep.is_flush[s])]
        flushes += len(flushing)
        state_before, rec_before = state.clone(), rec.state.cpu()

        snaps = torch.full((B, T, HV, V, K), float("nan"))
        o_base = gdn_recurrent(*x, state=state, snapshots=snaps, update_state=False, **kw)
        o_ours = gdn_replay_verify(*x, checkpoint=checkpoint, ring=ring, **kw)
        o_rec = rec.verify(*xd, *params, slots_d, cu_d).cpu()
        o_rep = rep.verify(*xd, *params, slots_d, cu_d).cpu()

        assert o_rec.shape == o_rep.shape == x[2].shape and o_rep.dtype == dtype
        err["rec_out"] = max(err["rec_out"], rel(o_rec[tok], o_base[tok]))
        err["rep_out"] = max(err["rep_out"], rel(o_rep[tok], o_base[tok]))
        err["rep_vs_ours_out"] = max(err["rep_vs_ours_out"], rel(o_rep[tok], o_ours[tok]))
        assert not o_rep[pad_tok].any(), "SGLang's replay verify zeroes padding rows"
        ckpt = rep.checkpoint.cpu()
        for s in flushing:  # the flush folded the committed history: checkpoint == committed state
            err["flush_ckpt"] = max(err["flush_ckpt"], rel(ckpt[s], state_before[s]))

        n = torch.randint(1, T + 1, (B,), generator=gen, dtype=torch.int32)
        for i in live_rows:
            state[rows[i]] = snaps[i, int(n[i]) - 1]
        ring_commit(ring, slots, n, impl=REF)
        rec.commit(slots_d, n.to(device))
        rep.commit(slots_d, n.to(device))

        live_t = torch.tensor(live, dtype=torch.int32)
        ours_replay_state = gdn_exact_fold(checkpoint, ring, live_t, out=torch.empty(len(live), HV, V, K), impl=REF)
        assert torch.equal(ours_replay_state, state[live]), "our exact fold is bitwise the baseline"
        rec_state = rec.state.cpu()
        rep_state = rep.committed_state(slots_d).cpu()
        assert not rep_state[pad_rows].any()
        rep_state = rep_state[live_rows]
        assert torch.equal(rep_state, rec_state[live]), "SGLang's exact fold is bitwise its recurrent kernel"
        err["rec_state"] = max(err["rec_state"], rel(rec_state[live], state[live]))
        err["rep_state"] = max(err["rep_state"], rel(rep_state, state[live]))
        idle = [s for s in range(S) if s not in live]
        assert torch.equal(rec_state[idle], rec_before[idle]), "rows not in the batch keep their state"

    errs = ", ".join(f"{name}={e:.2e}" for name, e in err.items())
    print(f"\n{dtype} T={T} L={L} scatter={scatter} on {device.type}, flushes={flushes}: {errs}")
    assert flushes > 0
    bound = out_bound(dtype, device)
    assert err["rec_out"] <= OUT_BOUND[dtype], err
    assert err["rep_out"] <= bound and err["rep_vs_ours_out"] <= bound, err
    assert err["rec_state"] <= STATE_BOUND and err["rep_state"] <= STATE_BOUND, err
    assert err["flush_ckpt"] <= STATE_BOUND, err


def test_replay_peer_reset_and_sizes(kernels, device):
    T, L = 4, 16
    rep = SGLangReplayPeer(S, H, HV, K, V, T=T, L=L, dtype=torch.float16, device=device, kernels=kernels)
    rep.write_pos.fill_(5)
    rep.cache_base.fill_(3)
    rep.is_flush.fill_(1)
    rep.reset(torch.tensor([2, -1, 0], dtype=torch.int32, device=device))
    assert rep.write_pos.tolist() == [0, 5, 0] and rep.cache_base.tolist() == [0, 3, 0]
    assert rep.is_flush.tolist() == [0, 1, 0]
    per_slot = 2 * (HV * L * V * 2 + H * L * K * 2) + 2 * HV * L * 4  # d, rawv, k, rawk (fp16); g, beta (fp32)
    assert rep.nbytes == S * per_slot
    assert rep.cursor_nbytes == S * (4 + 4 + 1)
    rec = SGLangRecurrentPeer(S, H, HV, K, V, T=T, max_batch=8, dtype=torch.float16, device=device, kernels=kernels)
    assert rec.nbytes == 8 * T * HV * V * K * 4
    with pytest.raises(ValueError, match="power of two"):
        SGLangReplayPeer(S, H, HV, K, V, T=4, L=4, dtype=torch.float16, device=device, kernels=kernels)


# --- one-token decode ring -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_ring_decode_chain(kernels, device, dtype):
    L = 16
    gen = torch.Generator().manual_seed(7)
    cpu = torch.device("cpu")
    A_log = torch.rand(HV, generator=gen) * 2 - 1.5
    dt_bias = torch.randn(HV, generator=gen) * 0.5
    state = torch.randn(S, HV, V, K, generator=gen) * 0.2  # ours (reference backend, CPU)
    dec = SGLangRingDecodePeer(S, H, HV, K, V, L=L, dtype=dtype, device=device, kernels=kernels)
    dec.checkpoint.copy_(state)
    params = (A_log.to(device), dt_bias.to(device))
    # The ring decode rounds beta to the activation dtype (ours keeps it fp32) and folds the ring
    # open-loop with dots in the activation dtype: looser than the verify peers for fp16.
    o_bound = 1e-4 if dtype == torch.float32 else 5e-3
    s_bound = 1e-5 if dtype == torch.float32 else 5e-3
    if device.type == "cuda" and dtype == torch.float32:
        o_bound = s_bound = 5e-3  # tf32 reconstruction dots
    err_o = err_s = 0.0
    flushes = 0
    for _ in range(STEPS):
        perm = torch.randperm(S, generator=gen).tolist()  # every slot decodes every step, rows shuffled
        rows = perm[:1] + [-1] + perm[1:]
        slots = torch.tensor(rows, dtype=torch.int32)
        B = len(rows)
        x = (rand(gen, B, H, K, dtype=dtype, device=cpu), rand(gen, B, H, K, dtype=dtype, device=cpu),
             rand(gen, B, HV, V, dtype=dtype, device=cpu), rand(gen, B, HV, dtype=dtype, device=cpu),
             rand(gen, B, HV, dtype=dtype, device=cpu))  # fmt: skip
        will_flush = [s for s in perm if int(dec.write_pos[s]) == L - 1]
        flushes += len(will_flush)
        cu = torch.arange(B + 1, dtype=torch.int32)
        o_ref = gdn_recurrent(*x, A_log=A_log, dt_bias=dt_bias, state=state, slots=slots, cu_seqlens=cu, impl=REF)
        o = dec.decode(*(t.to(device) for t in x), *params, slots.to(device)).cpu()
        live = [i for i, s in enumerate(rows) if s >= 0]
        assert not o[[i for i, s in enumerate(rows) if s < 0]].any()
        err_o = max(err_o, rel(o[live], o_ref[live]))
        err_s = max(err_s, rel(dec.committed_state(torch.tensor(perm, dtype=torch.int32, device=device)).cpu(),
                               state[perm]))  # fmt: skip
        ckpt, wp = dec.checkpoint.cpu(), dec.write_pos.cpu()
        for s in will_flush:
            assert int(wp[s]) == 0
            err_s = max(err_s, rel(ckpt[s], state[s]))
    print(f"\nring decode {dtype} L={L} on {device.type}, flushes={flushes}: out={err_o:.2e} state={err_s:.2e}")
    assert flushes == S  # each slot flushed at its 16th step
    assert err_o <= o_bound and err_s <= s_bound, (err_o, err_s)


# --- CUDA graphs ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_graph_capture(kernels):
    """verify + commit of both peers and the ring decode capture into one graph and replay like eager."""
    dev = torch.device("cuda")
    T, L, dtype = 4, 16, torch.bfloat16
    gen = torch.Generator().manual_seed(3)
    rows = [2, -1, 0, 1]
    B, N = len(rows), len(rows) * T
    slots = torch.tensor(rows, dtype=torch.int32, device=dev)
    cu = torch.arange(0, N + 1, T, dtype=torch.int32, device=dev)
    A_log = (torch.rand(HV, generator=gen) * 2 - 1.5).to(dev)
    dt_bias = (torch.randn(HV, generator=gen) * 0.5).to(dev)
    state0 = (torch.randn(S, HV, V, K, generator=gen) * 0.2).to(dev)

    def peers():
        rec = SGLangRecurrentPeer(S, H, HV, K, V, T=T, max_batch=B, dtype=dtype, device=dev, kernels=kernels)
        rep = SGLangReplayPeer(S, H, HV, K, V, T=T, L=L, dtype=dtype, device=dev, kernels=kernels)
        dec = SGLangRingDecodePeer(S, H, HV, K, V, L=L, dtype=dtype, device=dev, kernels=kernels)
        for t in (rec.state, rep.checkpoint, dec.checkpoint):
            t.copy_(state0)
        return rec, rep, dec

    def inputs():
        x = [rand(gen, N, H, K, dtype=dtype, device=dev), rand(gen, N, H, K, dtype=dtype, device=dev),
             rand(gen, N, HV, V, dtype=dtype, device=dev), rand(gen, N, HV, dtype=dtype, device=dev),
             rand(gen, N, HV, dtype=dtype, device=dev)]  # fmt: skip
        return x, torch.randint(1, T + 1, (B,), generator=gen, dtype=torch.int32).to(dev)

    def step(peer_set, x, n, outs):
        rec, rep, dec = peer_set
        outs[0].copy_(rec.verify(*x, A_log, dt_bias, slots, cu))
        rep.verify(*x, A_log, dt_bias, slots, cu, out=outs[1])
        rec.commit(slots, n)
        rep.commit(slots, n)
        dec.decode(*(t[:B] for t in x), A_log, dt_bias, slots, out=outs[2])

    eager, graphed = peers(), peers()
    static_x, static_n = inputs()
    outs_g = [torch.empty(N, HV, V, dtype=dtype, device=dev) for _ in range(2)] + [
        torch.empty(B, HV, V, dtype=dtype, device=dev)
    ]
    outs_e = [torch.empty_like(t) for t in outs_g]
    # warm up (compiles) on throwaway peers, then capture on the graphed set
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(peers(), static_x, static_n, [torch.empty_like(t) for t in outs_g])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(graphed, static_x, static_n, outs_g)
    for _ in range(20):
        x, n = inputs()
        for s, t in zip(static_x, x):
            s.copy_(t)
        static_n.copy_(n)
        graph.replay()
        step(eager, x, n, outs_e)
        for g_out, e_out in zip(outs_g, outs_e):
            assert torch.equal(g_out, e_out)
    torch.cuda.synchronize()
    rec_g, rep_g, dec_g = graphed
    rec_e, rep_e, dec_e = eager
    assert torch.equal(rec_g.state, rec_e.state)
    assert torch.equal(rep_g.checkpoint, rep_e.checkpoint)
    assert torch.equal(rep_g.write_pos, rep_e.write_pos) and torch.equal(rep_g.is_flush, rep_e.is_flush)
    assert torch.equal(dec_g.checkpoint, dec_e.checkpoint) and torch.equal(dec_g.write_pos, dec_e.write_pos)
    assert int(rep_e.is_flush.sum()) + int(rep_e.cache_base.sum()) > 0  # the chain went through flushes
