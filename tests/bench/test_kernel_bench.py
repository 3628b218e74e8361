"""The kernel bench's own logic on the CPU: gates refuse to time, fold cost, JSON keys, grid and budget, CLI errors.

Fake steps stand in for kernels where the logic, not the arithmetic of a kernel, is under test; one
run with replayssm's real steps (PyTorch references on the CPU) checks the whole path end to end.
"""

import json
import os

import pytest
import torch

from replayssm.bench.backends import OURS, Backend
from replayssm.bench.check import count_folds, gate_steps, lockstep, verdict
from replayssm.bench.kernels import KernelBenchConfig, run_kernel_bench
from replayssm.bench.point import bench_point, fold_cost
from replayssm.bench.steps import RecurrentStep, gather_rows
from replayssm.cli import main
from replayssm.ops import GDNShape

GEO = GDNShape(H=1, HV=2, K=16, V=16)
PER_LAYER_US = {"recurrent": 50.0, "replay": 20.0}
FOLD_US = 3.0


class FakeStep:
    """The recurrent reference's arithmetic (so gates can pass) plus a known cost for the fake timer:
    ``PER_LAYER_US`` per layer, plus ``FOLD_US`` per folded record in a frozen flush step. ``skew``
    adds an error to the committed state, ``nan`` poisons the outputs."""

    def __init__(self, case, kind, skew=0.0, nan=False):
        self.inner, self.kind, self.skew, self.nan = RecurrentStep(case), kind, skew, nan
        self.layers = case.layers
        self.records = 0

    @property
    def outputs(self):
        return [o + float("nan") for o in self.inner.outputs] if self.nan else self.inner.outputs

    def __call__(self):
        self.inner()

    def committed(self, layer):
        return self.inner.committed(layer) + self.skew

    def set_cursors(self, flush):
        self.records = 5 if flush else 0
        return self.records

    def cost_s(self):
        return self.layers * (PER_LAYER_US[self.kind] + self.records * FOLD_US) * 1e-6


class FakeTimer:
    def __init__(self):
        self.timed = []

    def __call__(self, step):
        self.timed.append(step)
        step()
        return step.cost_s()


def fake_backends(bad=None, nan=None):
    def make(impl, kind, gate, skew=0.0, poison=False):
        return Backend(impl, kind, lambda case: FakeStep(case, kind, skew, poison), gate)

    return lambda T: [
        Backend(OURS, "recurrent", lambda case: FakeStep(case, "recurrent"), "reference"),
        make(OURS, "replay", "bitwise", skew=1e-3 if bad == "ours" else 0.0),
        make("sglang-9.9", "recurrent", "tolerance", poison=nan == "sglang"),
        make("sglang-9.9", "replay", "tolerance", skew=1.0 if bad == "sglang" else 0.0),
    ]


def config(**kw):
    defaults = dict(geo=GEO, windows=(2,), rings=(8,), batches=(2,), dtype=torch.float32, peers=(), device="cpu",
                    min_working_set=0)  # fmt: skip
    return KernelBenchConfig(**{**defaults, **kw})


def test_fold_cost():
    assert fold_cost(1675.0, 502.0, 12) == pytest.approx(97.75)
    with pytest.raises(ValueError, match="at least one record"):
        fold_cost(10.0, 5.0, 0)


@pytest.mark.parametrize("bad, nan", [(None, None), ("ours", None), ("sglang", None), (None, "sglang")])
def test_point_refuses_to_time_what_failed_its_gate(bad, nan):
    timer = FakeTimer()
    backends = fake_backends(bad, nan)(2)
    row = bench_point(config(), 2, 2, 8, 1e12, backends, timer)
    failed = {"ours": f"{OURS}/replay", "sglang": "sglang-9.9/replay"}.get(bad) or (nan and "sglang-9.9/recurrent")
    assert row["refused"] == ([failed] if failed else [])
    for b in backends:
        key = f"{b.impl}/{'recurrent_us' if b.kind == 'recurrent' else 'replay_random_us'}"
        assert (key in row) == (b.label != failed), key
        assert row["gates"][b.label]["passed"] == (b.label != failed)
    if failed:
        assert row["gates"][failed]["reason"]
    assert not any(s.skew or s.nan for s in timer.timed), "a step that failed its gate was timed"
    timed = [b for b in backends if b.label != failed]
    assert len(timer.timed) == sum(1 if b.kind == "recurrent" else 3 for b in timed)


def test_point_times_and_fold_cost_per_layer():
    row = bench_point(config(), 2, 2, 8, 1e12, fake_backends()(2), FakeTimer())
    for impl in (OURS, "sglang-9.9"):
        assert row[f"{impl}/recurrent_us"] == pytest.approx(PER_LAYER_US["recurrent"])
        assert row[f"{impl}/replay_random_us"] == pytest.approx(PER_LAYER_US["replay"])
        assert row[f"{impl}/replay_nonflush_us"] == pytest.approx(PER_LAYER_US["replay"])
        assert row[f"{impl}/replay_flush_us"] == pytest.approx(PER_LAYER_US["replay"] + 5 * FOLD_US)
        assert row[f"{impl}/fold_us_per_record"] == pytest.approx(FOLD_US)
    state_bytes = GEO.HV * GEO.V * GEO.K * 4
    assert row["floor_us"] == pytest.approx(2 * state_bytes * (1 + row["fold_rate"]) / 1e12 * 1e6)
    # T=2, L=8: a non-flush step reads 4 history records: fp32 u per value head and fp32 k^ per key head
    records = 4 * (GEO.HV * GEO.V * 4 + GEO.H * GEO.K * 4)
    assert row["nonflush_read_floor_us"] == pytest.approx(2 * (state_bytes + records) / 1e12 * 1e6)


def test_run_writes_json_keys_table_and_png(tmp_path):
    cfg = config(windows=(1, 2), rings=(4,), batches=(1, 2))
    payload = run_kernel_bench(cfg, tmp_path, peers={"9.9": None}, timer=FakeTimer(), bandwidth=1e12,
                               backends=fake_backends())  # fmt: skip
    saved = json.loads((tmp_path / "kernels.json").read_text())
    assert [(p["T"], p["L"], p["B"]) for p in saved["points"]] == [(1, 4, 1), (1, 4, 2), (2, 4, 1), (2, 4, 2)]
    row = saved["points"][-1]
    for key in ("sglang-9.9/replay_random_us", "sglang-9.9/fold_us_per_record", "sglang-9.9/recurrent_us",
                "replayssm/replay_random_x_floor", "replayssm/speedup_vs_sglang-9.9",
                "replayssm/recurrent_vs_sglang-9.9", "replayssm/speedup_vs_recurrent", "floor_us",
                "nonflush_read_floor_us", "replayssm/replay_nonflush_x_read_floor"):  # fmt: skip
        assert key in row, key
    assert row["replayssm/speedup_vs_sglang-9.9"] == pytest.approx(1.0)
    assert row["replayssm/speedup_vs_fastest_peer"] == pytest.approx(1.0) == row["replayssm/recurrent_vs_fastest_peer"]
    assert saved["impls"] == [OURS, "sglang-9.9"] and "9.9" in saved["env"]["sglang"]
    assert all(t in payload["table"] for t in ("rep 9.9", "fold/rec ours", "x best sgl", "rec/sgl"))
    assert (tmp_path / "kernels.png").stat().st_size > 0
    assert saved["complete"] is True


def test_an_interrupted_run_leaves_its_points_marked_incomplete(tmp_path):
    """The JSON is rewritten after every point; an interrupted run's file looked like a finished one."""
    cfg = config(windows=(1,), rings=(4,), batches=(1, 2))
    backends = fake_backends()
    calls = []

    def interrupt_second(T):
        calls.append(T)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return backends(T)

    with pytest.raises(KeyboardInterrupt):
        run_kernel_bench(cfg, tmp_path, peers={}, timer=FakeTimer(), bandwidth=1e12, backends=interrupt_second)
    saved = json.loads((tmp_path / "kernels.json").read_text())
    assert saved["complete"] is False and [(p["T"], p["B"]) for p in saved["points"]] == [(1, 1)]


def test_max_seconds_skips_points(tmp_path):
    payload = run_kernel_bench(config(max_seconds=0.0), tmp_path, peers={}, timer=FakeTimer(), bandwidth=1e12,
                               backends=fake_backends())  # fmt: skip
    assert payload["points"] == [] and payload["skipped"] == [{"T": 2, "L": 8, "B": 2}]


def test_grid_skips_rings_shorter_than_two_windows():
    assert config(windows=(1, 4), rings=(4, 8), batches=(3,)).grid() == [(1, 4, 3), (1, 8, 3), (4, 8, 3)]


def test_real_steps_end_to_end(tmp_path):
    """replayssm's own steps (references on the CPU) through the whole bench: gated bitwise, timed."""
    payload = run_kernel_bench(config(windows=(1, 2), rings=(4,), batches=(2,)), tmp_path, peers={}, bandwidth=1e12)
    for row in payload["points"]:
        gate = row["gates"][f"{OURS}/replay"]
        assert gate["passed"] and gate["bitwise"] and gate["folds"] >= 2, gate
        assert row["refused"] == [] and row[f"{OURS}/fold_us_per_record"] is not None


@pytest.mark.parametrize("T, L", [(1, 2), (1, 16), (2, 32), (4, 16), (8, 16), (8, 32)])
def test_gate_steps_fold_every_row_even_at_one_token_per_step(T, L):
    B = 3
    for accepted in ([1] * B, [T] * B):
        history = [(list(range(B)), accepted)] * gate_steps(T, L)
        assert count_folds(history, T, L) >= B


def test_count_folds_follows_slots():
    # slot 0 runs 3 steps of 2 (T=2, L=4): flagged after the first, folds at steps 2 and 3; padding counts nothing
    history = [([0, -1], [2, 2]), ([0, -1], [2, 2]), ([-1, 0], [2, 2])]
    assert count_folds(history, 2, 4) == 2


def test_verdict_reasons():
    ok = {"max_out_err": 1e-3, "max_state_err": 1e-3, "bitwise": False, "nan": False}
    assert verdict(ok, "tolerance")["passed"]
    assert verdict(ok, "bitwise")["reason"] == "committed state not bitwise equal to the recurrent baseline"
    assert "committed-state error" in verdict({**ok, "max_state_err": 0.5}, "tolerance")["reason"]
    assert "NaN" in verdict({**ok, "nan": True, "max_out_err": float("nan")}, "tolerance")["reason"]


def test_lockstep_catches_a_skewed_state():
    from replayssm.bench.steps import make_case

    case = make_case(GEO, 2, 2, 4, 1, torch.float32, device="cpu")
    stats = lockstep(case, RecurrentStep.build, {"same": RecurrentStep.build,
                                                 "skew": lambda c: FakeStep(c, "replay", skew=1e-6)})  # fmt: skip
    assert stats["same"]["bitwise"] and stats["same"]["max_state_err"] == 0.0
    assert not stats["skew"]["bitwise"] and stats["skew"]["max_state_err"] > 0


def test_gather_rows_zeroes_padding():
    state = torch.arange(6.0).view(3, 2)
    assert gather_rows(state, torch.tensor([2, -1, 0], dtype=torch.int32)).tolist() == [[4, 5], [0, 0], [0, 1]]


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--device", "cpu", "--peers-dir", "{tmp}/none"], "--peers-dir"),
        (["--device", "cpu", "--dtype", "bf16"], "--dtype"),  # the peers' kernels in the interpreter
        (["--device", "cpu", "--peers", "0.4.0"], "--peers"),
    ],
)
def test_cli_user_errors_are_one_line(argv, flag, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["bench", "kernels", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"replayssm bench kernels: error: {flag}"), err


def test_cli_bf16_on_the_cpu_without_the_interpreter(tmp_path, capsys, monkeypatch):
    """bf16 is refused on the CPU only where kernels run in Triton's interpreter (which computes it wrongly): the
    peers', or replayssm's own with REPLAYSSM_IMPL=triton. With --peers none replayssm's ops run as their PyTorch
    references, and the run goes ahead (here cut short by --max-seconds: exit 1, nothing timed)."""
    argv = ["bench", "kernels", "--device", "cpu", "--dtype", "bf16", "--peers", "none", "--H", "1", "--HV", "1",
            "--K", "16", "--V", "16", "--windows", "2", "--rings", "4", "--batches", "1", "--max-seconds", "1e-9",
            "--out", str(tmp_path)]  # fmt: skip
    monkeypatch.delenv("REPLAYSSM_IMPL", raising=False)
    assert main(argv) == 1
    assert "nothing was timed" in capsys.readouterr().err
    monkeypatch.setenv("REPLAYSSM_IMPL", "triton")
    assert main(argv) == 2
    assert "error: --dtype bf16" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_cli_without_gpu_points_to_the_cpu_smoke(tmp_path, capsys):
    assert main(["bench", "kernels", "--out", str(tmp_path)]) == 2
    assert "--device cpu" in capsys.readouterr().err


def test_cli_peers_refuses_unknown_release(capsys):
    assert main(["bench", "peers", "--releases", "0.4.0"]) == 2
    assert "--releases" in capsys.readouterr().err


def test_best_tile_is_the_fastest_random_step_among_tiles_that_passed_everywhere():
    from replayssm.bench.sweep import best_tile, parse_tile
    from replayssm.ops import launch

    def row(tile, B, random, passed=True):
        return {"tile": tile, "B": B, "gate": {"passed": passed}, "replay_random_us": random}

    rows = [row("4x1", 256, 900), row("2x2x2", 256, 800), row("8x1", 256, 100), row("8x1", 8, 1, passed=False)]
    assert best_tile(rows) == "2x2x2"  # 8x1 is faster but failed its gate at B=8
    assert best_tile([row("4x1", 256, 5, passed=False)]) is None
    assert parse_tile("2x2x3") == launch.TileConfig(num_warps=2, rows_per_thread=2, stages=3)
    assert parse_tile("4x1") == launch.TileConfig(num_warps=4, rows_per_thread=1)
    with pytest.raises(ValueError, match="is not"):
        parse_tile("16")
    with pytest.raises(ValueError, match="power of two"):
        parse_tile("3x1")


def test_point_survives_backends_that_raise():
    """A backend that raises while gated is refused with the reason; one that raises while timed is
    recorded under errors; the others are still timed."""

    class Exploding(FakeStep):
        def set_cursors(self, flush):
            raise RuntimeError("boom")

    def unbuildable(case):
        raise RuntimeError("no kernel for this GPU")

    backends = fake_backends()(2)
    backends[1] = Backend(OURS, "replay", lambda case: Exploding(case, "replay"), "bitwise")
    backends[3] = Backend("sglang-9.9", "replay", unbuildable, "tolerance")
    row = bench_point(config(), 2, 2, 8, 1e12, backends, FakeTimer())
    assert row["refused"] == ["sglang-9.9/replay"]
    assert row["gates"]["sglang-9.9/replay"]["reason"] == "raised RuntimeError: no kernel for this GPU"
    assert row["errors"] == {f"{OURS}/replay": "RuntimeError: boom"}
    assert f"{OURS}/replay_random_us" not in row and "sglang-9.9/recurrent_us" in row


def test_derive_ratios_point_the_right_way():
    from replayssm.bench.kernel_report import derive

    row = {"floor_us": 25.0, f"{OURS}/replay_random_us": 50.0, f"{OURS}/recurrent_us": 100.0}
    row.update({"sglang-a/replay_random_us": 100.0, "sglang-b/replay_random_us": 80.0, "sglang-b/recurrent_us": 95.0})
    derive(row, [OURS, "sglang-a", "sglang-b"])
    assert row[f"{OURS}/replay_random_x_floor"] == 2.0 and row[f"{OURS}/speedup_vs_recurrent"] == 2.0
    assert row[f"{OURS}/speedup_vs_sglang-a"] == 2.0 and row[f"{OURS}/speedup_vs_fastest_peer"] == 1.6
    assert row[f"{OURS}/recurrent_vs_fastest_peer"] == pytest.approx(100 / 95)
    assert f"{OURS}/recurrent_vs_sglang-a" not in row


def test_environment_records_the_replayssm_switches_and_the_header_names_them(monkeypatch):
    from replayssm.bench.report import COMMIT_ENV, environment, header

    for k in [k for k in os.environ if k.startswith("REPLAYSSM_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", "0")
    monkeypatch.setenv(COMMIT_ENV, "abc1234")
    env = environment()
    assert env["commit"] == "abc1234" and env["switches"] == {"REPLAYSSM_VERIFY_DIF": "0"}
    assert header(env).endswith("| REPLAYSSM_VERIFY_DIF=0")
    monkeypatch.setenv("REPLAYSSM_SOAK_LOG", "/a/long/path/to/somewhere/soak.jsonl")
    env = environment()
    assert env["switches"]["REPLAYSSM_SOAK_LOG"] == "/a/long/path/to/somewhere/soak.jsonl"
    assert header(env).endswith("| REPLAYSSM_SOAK_LOG=... REPLAYSSM_VERIFY_DIF=0")  # a path stays in the JSON
    monkeypatch.delenv("REPLAYSSM_SOAK_LOG")
    monkeypatch.delenv("REPLAYSSM_VERIFY_DIF")
    env = environment()
    assert env["switches"] == {} and "REPLAYSSM_" not in header(env)
