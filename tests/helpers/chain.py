"""A speculative chain driver: the recurrent baseline and ReplaySSM side by side on the same inputs."""

import torch

from replayssm.ops import (
    Ring,
    RingLayers,
    gdn_exact_fold,
    gdn_fold_ahead,
    gdn_recurrent,
    gdn_replay_verify,
    ring_commit,
    ring_reset,
)

from .inputs import make_gdn_inputs, random_state, slot_tensor


def call(fn, x, **kw):
    return fn(x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
              cu_seqlens=x["cu_seqlens"], **kw)  # fmt: skip


class Chain:
    """Baseline state + snapshots vs checkpoint + ring, one shared random stream of inputs."""

    def __init__(self, S, H, HV, K, V, *, T, L, dtype, device, impl, seed=0, rng_device="cpu", fold_phase=False):
        self.gen = torch.Generator(device=rng_device).manual_seed(seed)  # "cuda": fast inputs at real shapes
        self.fold_phase = fold_phase  # ring_commit's (window 1: rows fold early, in their own phase)
        self.dims, self.T, self.dtype, self.device, self.impl = (S, H, HV, K, V), T, dtype, device, impl
        self.state = random_state(S, HV, V, K, device=device, gen=self.gen)  # baseline's committed states
        self.checkpoint = self.state.clone()
        self.ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=dtype, device=device)
        self.flushes = self.early_flushes = 0
        self.A_log = (torch.rand(HV, generator=self.gen, device=rng_device) * 2 - 1.5).to(device)
        self.dt_bias = (torch.randn(HV, generator=self.gen, device=rng_device) * 0.5).to(device)

    def verify(self, slots, lens):
        S, H, HV, K, V = self.dims
        x = make_gdn_inputs(lens, H, HV, K, V, dtype=self.dtype, device=self.device, gen=self.gen)
        x["A_log"], x["dt_bias"] = self.A_log, self.dt_bias
        self.slots = slot_tensor(slots, self.device)
        self.lens = lens
        self.snaps = torch.full((len(lens), self.T, HV, V, K), float("nan"), device=self.device)
        o_base = call(gdn_recurrent, x, state=self.state, slots=self.slots, snapshots=self.snaps,
                      update_state=False, impl=self.impl)  # fmt: skip
        live = [s for s in slots if s >= 0]
        cur = self.ring.cursors
        self.flushes += int(cur.flush[live].sum()) if live else 0
        self.early_flushes += sum(int(cur.flush[s]) and int(cur.write_pos[s]) + 2 * self.T <= cur.L for s in live)
        o_replay = call(gdn_replay_verify, x, checkpoint=self.checkpoint, ring=self.ring, slots=self.slots,
                        impl=self.impl)  # fmt: skip
        self.last_inputs, self.last_out = x, o_replay
        return o_base, o_replay

    def commit(self, num_accepted):
        for i, s in enumerate(self.slots.tolist()):
            if s >= 0:
                self.state[s] = self.snaps[i, num_accepted[i] - 1]
        n = torch.tensor(num_accepted, dtype=torch.int32, device=self.device)
        ring_commit(self.ring, self.slots, n, fold_phase=self.fold_phase, impl=self.impl)

    def committed_replay(self, slots):
        """ReplaySSM committed state of ``slots``: checkpoint + pending history folded on a copy."""
        S, H, HV, K, V = self.dims
        out = torch.full((len(slots), HV, V, K), float("nan"), device=self.device)
        return gdn_exact_fold(self.checkpoint, self.ring, slot_tensor(slots, self.device), out=out, impl=self.impl)

    def reuse(self, slot):
        """Free ``slot`` and hand it out again with a fresh state (its old ring records and fold markers stay
        behind: the reset's new epoch must keep them from mattering)."""
        S, H, HV, K, V = self.dims
        fresh = random_state(1, HV, V, K, device=self.device, gen=self.gen)[0]
        self.state[slot] = fresh
        self.checkpoint[slot] = fresh
        ring_reset(self.ring, slot_tensor([slot], self.device), impl=self.impl)


class LayerChain:
    """Several layers' baseline states (with snapshots) and checkpoints + rings (``RingLayers``, one set of cursors),
    fed the same random windows: what a multi-layer op (``gdn_fold_ahead``) needs around it."""

    def __init__(self, S, NL, H, HV, K, V, *, T, L, device, impl, dtype=torch.float32, seed=0, rng_device="cpu"):
        self.gen = torch.Generator(device=rng_device).manual_seed(seed)
        self.dims, self.T, self.dtype, self.device, self.impl = (NL, H, HV, K, V), T, dtype, device, impl
        self.state = torch.stack([random_state(S, HV, V, K, device=device, gen=self.gen) for _ in range(NL)])
        self.checkpoint = self.state.clone()
        self.rings = RingLayers.allocate(NL, S, H, HV, K, V, L=L, window=T, dtype=dtype, device=device)
        self.params = [make_gdn_inputs([1], H, HV, K, V, device=device, gen=self.gen) for _ in range(NL)]

    def step(self, slots, lens, accepted, ahead: bool):
        """Verify every layer (both backends), commit ``accepted``, then fold ahead if asked; returns every layer's
        (baseline, replay) outputs."""
        NL, H, HV, K, V = self.dims
        ids = slot_tensor(slots, self.device)
        outs = []
        for layer in range(NL):
            x = make_gdn_inputs(lens, H, HV, K, V, dtype=self.dtype, device=self.device, gen=self.gen)
            x["A_log"], x["dt_bias"] = self.params[layer]["A_log"], self.params[layer]["dt_bias"]
            snaps = torch.full((len(lens), self.T, HV, V, K), float("nan"), device=self.device)
            o_base = call(gdn_recurrent, x, state=self.state[layer], slots=ids, snapshots=snaps, update_state=False,
                          impl=self.impl)  # fmt: skip
            o = call(gdn_replay_verify, x, checkpoint=self.checkpoint[layer], ring=self.rings.layers[layer], slots=ids,
                     impl=self.impl)  # fmt: skip
            outs.append((o_base, o))
            for i, s in enumerate(slots):
                if s >= 0:
                    self.state[layer, s] = snaps[i, accepted[i] - 1]
        ring_commit(self.rings.cursors, ids, torch.tensor(accepted, dtype=torch.int32, device=self.device),
                    impl=self.impl)  # fmt: skip
        if ahead:
            gdn_fold_ahead(self.checkpoint, self.rings, ids, impl=self.impl)
        return outs

    def committed(self, layer, slots):
        """ReplaySSM committed state of ``slots`` in ``layer`` (the pending history folded on a copy)."""
        NL, H, HV, K, V = self.dims
        out = torch.full((len(slots), HV, V, K), float("nan"), device=self.device)
        return gdn_exact_fold(self.checkpoint[layer], self.rings.layers[layer], slot_tensor(slots, self.device),
                              out=out, impl=self.impl)  # fmt: skip
