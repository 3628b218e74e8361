"""Lockstep soak of the two pool backends: many verify/commit steps with slot churn, zero divergences allowed.

Every step runs conv + verify (sometimes a plain decode) on every live request in a replay pool and a recurrent
pool, commits a random accepted prefix, and compares the committed SSM and conv states of every live slot
bitwise. Between steps requests finish and new ones arrive (free, alloc + prefill), are preempted to the CPU
and resumed (offload, free, restore: their committed state must come back unchanged), forked, flushed; some
steps are aborted after every layer ran, and some fail after an op wrote and are retried. Used by
``tests/gpu/test_soak.py`` (real geometry, ``run_from_env``) and ``tests/state/test_soak_smoke.py`` (CPU).

Per-step work is kept small (a few running requests, one layer) so that the step count, not the batch, makes
the soak long: the default 100,000 steps are meant to take a few minutes on one GPU.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch

import replayssm.state.pool as pool_module
from replayssm.state import GDNStatePool, PoolConfig


@dataclass(frozen=True)
class SoakConfig:
    steps: int
    H: int = 16
    HV: int = 64
    K: int = 128
    V: int = 128
    window: int = 4
    num_layers: int = 1
    num_slots: int = 8
    batch: int = 4  # requests kept running (the pool has room for churn above it)
    dtype: torch.dtype = torch.bfloat16
    device: str = "cuda"
    seed: int = 0
    validate: bool = True  # the pools' host-side protocol checks (they read slot ids back every call)
    log_every: int = 1000
    # chances per step
    p_finish: float = 0.03
    p_preempt: float = 0.01
    p_resume: float = 0.3  # per step while something is parked
    p_fork: float = 0.01
    p_flush: float = 0.01
    p_abort: float = 0.01
    p_fail: float = 0.01
    p_decode: float = 0.05


class _Injected(RuntimeError):  # noqa: N818 - not an error of the code under test
    pass


def _inject(name: str):
    op = getattr(pool_module, name)

    def run(*a, **kw):
        op(*a, **kw)
        raise _Injected(f"injected after {name} wrote")

    setattr(pool_module, name, run)
    return lambda: setattr(pool_module, name, op)


class Soak:
    def __init__(self, cfg: SoakConfig, log=None):
        self.cfg, self.log = cfg, log
        self.rng = random.Random(cfg.seed)
        self.gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed)
        shape = dict(num_slots=cfg.num_slots, num_layers=cfg.num_layers, H=cfg.H, HV=cfg.HV, K=cfg.K, V=cfg.V,
                     window=cfg.window, dtype=cfg.dtype, device=cfg.device, max_batch=cfg.num_slots + 1,
                     validate=cfg.validate)  # fmt: skip
        self.pools = {b: GDNStatePool(PoolConfig(backend=b, **shape)) for b in ("replay", "recurrent")}
        self.C = self.pools["replay"].cfg.channels
        self.layers = [dict(A_log=self._r(cfg.HV, s=0.5) - 1.0, dt_bias=self._r(cfg.HV, s=0.5),
                            weight=self._r(self.C, 4, s=0.5).to(cfg.dtype)) for _ in range(cfg.num_layers)]  # fmt: skip
        self.live: list[int] = []
        self.parked: list[tuple[dict, list[torch.Tensor]]] = []
        self.stats = dict(steps=0, verify_steps=0, decode_steps=0, aborted=0, retried=0, folds=0, finished=0,
                          arrived=0, preempted=0, resumed=0, forked=0, flushed=0, divergences=0)  # fmt: skip

    def _r(self, *shape, s=1.0):
        return torch.randn(*shape, generator=self.gen, device=self.cfg.device) * s

    def _slots(self, ids):
        return torch.tensor(ids, dtype=torch.int32, device=self.cfg.device)

    def _both(self, fn):
        out = {b: fn(p) for b, p in self.pools.items()}
        if isinstance(out["replay"], torch.Tensor) and out["replay"].dtype == torch.int32:
            assert torch.equal(out["replay"], out["recurrent"]), "pools handed out different slots"
        return out

    def _committed(self, b, ids):
        p, s = self.pools[b], self._slots(ids)
        return [t for layer in range(self.cfg.num_layers)
                for t in (p.committed_state(layer, s), p.committed_conv_state(layer, s))]  # fmt: skip

    def _check(self, where: str):
        if not self.live:
            return
        a, b = self._committed("replay", self.live), self._committed("recurrent", self.live)
        if not all(torch.equal(x, y) for x, y in zip(a, b)):
            self.stats["divergences"] += 1
            raise AssertionError(f"committed states diverge {where} (step {self.stats['steps']})")

    def arrive(self, n: int = 1):
        ids = self._both(lambda p: p.alloc(n))["replay"].tolist()
        state = self._r(n, self.cfg.HV, self.cfg.V, self.cfg.K, s=0.05)
        conv = self._r(n, 3, self.C).to(self.cfg.dtype)
        for layer in range(self.cfg.num_layers):
            self._both(lambda p, layer=layer: p.write_prefill(layer, self._slots(ids), state, conv))
        self.live += ids
        self.stats["arrived"] += n

    def _inputs(self, lens):
        cfg, N = self.cfg, sum(lens)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=cfg.device)
        x = dict(q=self._r(N, cfg.H, cfg.K), k=self._r(N, cfg.H, cfg.K), v=self._r(N, cfg.HV, cfg.V),
                 a=self._r(N, cfg.HV), b=self._r(N, cfg.HV), x=self._r(N, self.C))  # fmt: skip
        return {k: t.to(cfg.dtype) for k, t in x.items()} | {"cu": cu}

    def _layer(self, p, layer, rows, x, decode):
        w = self.layers[layer]
        p.conv_update(layer, x["x"], weight=w["weight"], bias=None, slots=rows, cu_seqlens=x["cu"])
        kw = dict(A_log=w["A_log"], dt_bias=w["dt_bias"], slots=rows)
        if decode:
            return p.decode(layer, x["q"], x["k"], x["v"], x["a"], x["b"], **kw)
        return p.verify(layer, x["q"], x["k"], x["v"], x["a"], x["b"], cu_seqlens=x["cu"], **kw)

    def step(self):
        cfg, rng = self.cfg, self.rng
        decode = rng.random() < cfg.p_decode
        ids = rng.sample(self.live, len(self.live))
        if rng.random() < 0.2:
            ids.insert(rng.randrange(len(ids) + 1), -1)  # a padding row
        lens = [1] * len(ids) if decode else [rng.randint(1, cfg.window) for _ in ids]
        acc = [rng.randint(1, n) for n in lens]
        x, rows = self._inputs(lens), self._slots(ids)
        live_rows = self._slots([s for s in ids if s >= 0]).long()
        self.stats["folds"] += int(self.pools["replay"].cursors.flush[live_rows].sum())  # rows folding in this step
        fail_at = rng.randrange(cfg.num_layers) if (not decode and rng.random() < cfg.p_fail) else None
        for name, p in self.pools.items():
            for layer in range(cfg.num_layers):
                if layer == fail_at:  # the op writes, then the call fails; retried like a caller would
                    undo = _inject("gdn_replay_verify" if name == "replay" else "gdn_recurrent")
                    try:
                        self._layer(p, layer, rows, x, decode)
                        raise AssertionError("the injected failure did not happen")
                    except _Injected:
                        pass
                    finally:
                        undo()
                    p.verify(layer, x["q"], x["k"], x["v"], x["a"], x["b"], A_log=self.layers[layer]["A_log"],
                             dt_bias=self.layers[layer]["dt_bias"], slots=rows, cu_seqlens=x["cu"])  # fmt: skip
                else:
                    self._layer(p, layer, rows, x, decode)
        self.stats["retried"] += fail_at is not None
        if not decode and rng.random() < cfg.p_abort:
            self._both(lambda p: p.abort(rows))
            self.stats["aborted"] += 1
        else:
            self._both(lambda p: p.commit(rows, self._slots(acc)))
            self.stats["decode_steps" if decode else "verify_steps"] += 1
            # a commit that folds ahead (ops/fold_ahead.py) empties a flushing row's history: write_pos 0
            self.stats["folds"] += int((self.pools["replay"].cursors.write_pos[live_rows] == 0).sum())
        self.stats["steps"] += 1
        self._check("after a step")

    def churn(self):
        cfg, rng = self.cfg, self.rng
        free = cfg.num_slots - len(self.live)
        if self.live and rng.random() < cfg.p_finish:
            done = rng.sample(self.live, 1)
            self._both(lambda p: p.free(self._slots(done)))
            self.live = [s for s in self.live if s not in done]
            self.stats["finished"] += 1
        if len(self.live) > 1 and rng.random() < cfg.p_preempt:
            ids = rng.sample(self.live, rng.randint(1, 2))
            kept = self._committed("replay", ids)
            parked = self._both(lambda p: p.offload(self._slots(ids)))
            self._both(lambda p: p.free(self._slots(ids)))
            self.live = [s for s in self.live if s not in ids]
            self.parked.append((parked, kept))
            self.stats["preempted"] += len(ids)
            self._check("after a preemption")
        free = cfg.num_slots - len(self.live)
        if self.parked and rng.random() < cfg.p_resume and self.parked[0][0]["replay"].num_slots <= free:
            parked, kept = self.parked.pop(0)
            new = self._both(lambda p: p.restore(parked[p.cfg.backend]))["replay"].tolist()
            for b in self.pools:
                got = self._committed(b, new)
                assert all(torch.equal(x, y) for x, y in zip(got, kept)), f"{b}: a restored slot changed"
            self.live += new
            self.stats["resumed"] += len(new)
        free = cfg.num_slots - len(self.live)
        if self.live and free and rng.random() < cfg.p_fork:
            src = rng.sample(self.live, 1)
            new = self._both(lambda p: p.fork(self._slots(src)))["replay"].tolist()
            for b in self.pools:
                assert all(torch.equal(x, y) for x, y in zip(self._committed(b, src), self._committed(b, new)))
            self.live += new
            self.stats["forked"] += 1
        if self.live and rng.random() < cfg.p_flush:
            ids = rng.sample(self.live, rng.randint(1, len(self.live)))
            self._both(lambda p: p.flush(self._slots(ids)))
            self.stats["flushed"] += len(ids)
            self._check("after a flush")
        while len(self.live) < cfg.batch and cfg.num_slots - len(self.live) > 0:
            self.arrive(1)

    def run(self) -> dict:
        cfg = self.cfg
        self._write({"config": {k: str(v) for k, v in asdict(cfg).items()}, "meta": _meta(cfg.device)})
        t0 = time.perf_counter()
        self.churn()
        while self.stats["steps"] < cfg.steps:
            self.step()
            self.churn()
            if self.stats["steps"] % cfg.log_every == 0:
                self._write(dict(self.stats, seconds=round(time.perf_counter() - t0, 2)))
        self.stats["seconds"] = round(time.perf_counter() - t0, 2)
        self._write({"final": self.stats})
        return self.stats

    def _write(self, record: dict):
        if self.log is not None:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()


def _meta(device: str) -> dict:
    import triton

    return dict(device=torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
                torch=torch.__version__, triton=triton.__version__, commit=os.environ.get("REPLAYSSM_COMMIT", ""),
                started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))  # fmt: skip


def config_from_env(**kw) -> SoakConfig:
    """The soak ``tests/gpu/test_soak.py`` runs: ``REPLAYSSM_SOAK_STEPS`` (default 100,000),
    ``REPLAYSSM_SOAK_BATCH`` (running requests, default 4), ``REPLAYSSM_SOAK_VALIDATE=0`` (the pools' host-side
    checks off: fewer host syncs per step, the CUDA-graph configuration), ``REPLAYSSM_SOAK_DEVICE`` (default
    cuda), ``REPLAYSSM_SOAK_SEED``; ``kw`` overrides."""
    env = os.environ.get
    batch = int(env("REPLAYSSM_SOAK_BATCH", 4))
    cfg = dict(steps=int(env("REPLAYSSM_SOAK_STEPS", 100_000)), batch=batch, num_slots=2 * batch,
               validate=env("REPLAYSSM_SOAK_VALIDATE", "1") != "0", device=env("REPLAYSSM_SOAK_DEVICE", "cuda"),
               seed=int(env("REPLAYSSM_SOAK_SEED", 0)))  # fmt: skip
    return SoakConfig(**(cfg | kw))


def run_logged(cfg: SoakConfig, path: str | None = None) -> dict:
    """Run a soak, writing its JSON-lines log to ``path`` (default ``$REPLAYSSM_SOAK_LOG``, none if unset)."""
    path = path or os.environ.get("REPLAYSSM_SOAK_LOG")
    with open(path, "w") if path else nullcontext() as log:
        return Soak(cfg, log).run()
