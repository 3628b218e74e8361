"""Tables, ratios and plots of ``replayssm bench e2e`` (rows from ``bench.e2e.measure``)."""

from __future__ import annotations

from .report import format_table

NAMES = {"plain": "plain decode", "recurrent": "recurrent spec", "replay": "ReplaySSM spec",
         "replay-mtp": "ReplaySSM spec, MTP drafts"}  # fmt: skip

ROW_COLS = [
    ("C", "C", "d"), ("mode", "mode", "s"), ("tokens_per_s", "tok/s", ".1f"), ("step_ms_median", "step ms", ".2f"),
    ("floor_ms", "floor ms", ".2f"), ("x_floor", "x floor", ".2f"), ("floor_bound", "bound by", "s"),
    ("serial_floor_ms", "serial ms", ".2f"), ("x_serial", "x serial", ".2f"),
    ("tpot_ms_median", "TPOT p50", ".2f"), ("tpot_ms_p90", "TPOT p90", ".2f"), ("gdn_state_ms", "GDN ms", ".2f"),
    ("commit_ms", "commit ms", ".2f"), ("draft_ms", "draft ms", ".2f"), ("rest_ms", "rest ms", ".2f"),
    ("peak_gb", "peak GB", ".3g"), ("speedup_vs_recurrent", "vs recur", ".2f"),
    ("byte_bound_vs_recurrent", "byte bound", ".2f"), ("floor_bound_vs_recurrent", "roof bound", ".2f"),
    ("serial_bound_vs_recurrent", "serial bound", ".2f"),
    ("speedup_vs_plain", "vs plain", ".2f"),
]  # fmt: skip

PEAK_COLS = [
    ("mode", "mode", "s"), ("max_concurrency", "fits", "d"), ("C", "best C", "d"), ("tokens_per_s", "tok/s", ".1f"),
    ("tpot_ms_median", "TPOT p50", ".2f"), ("step_ms_median", "step ms", ".2f"), ("x_floor", "x floor", ".2f"),
    ("x_serial", "x serial", ".2f"), ("vs_recurrent", "vs recur", ".2f"), ("vs_plain", "vs plain", ".2f"),
]  # fmt: skip


def compare(rows: list[dict]) -> None:
    """Add to every replay row its speedups over recurrent and plain at the same C, and the byte-model bound
    over recurrent (ratio of byte floors; the same tokens per step, so throughput follows step time) with the
    roofline bound (floors that also count compute) and the serial bound (``StepBytes.serial_ms``: the GEMMs at their
    own roof, then the rest; rows without a serial floor, from older runs, get none)."""
    ok = [r for r in rows if "tokens_per_s" in r]
    by = {(r["mode"], r["C"]): r for r in ok}
    for r in ok:
        r["peak_gb"] = r["peak_gpu_bytes"] / 1e9
        if r["mode"] not in ("replay", "replay-mtp"):
            continue
        for other in ("recurrent", "plain"):
            o = by.get((other, r["C"]))
            if o is not None:
                r[f"speedup_vs_{other}"] = r["tokens_per_s"] / o["tokens_per_s"]
        rec = by.get(("recurrent", r["C"]))
        if rec is not None:
            r["byte_bound_vs_recurrent"] = rec["byte_floor_ms"] / r["byte_floor_ms"]
            r["floor_bound_vs_recurrent"] = rec["floor_ms"] / r["floor_ms"]
            if "serial_floor_ms" in rec and "serial_floor_ms" in r:
                r["serial_bound_vs_recurrent"] = rec["serial_floor_ms"] / r["serial_floor_ms"]


def peak_summary(peak: dict) -> list[dict]:
    """One line per backend: how many fit, the best concurrency and its throughput, ratios of the bests."""
    best = {m: p["best"] for m, p in peak.items() if p["best"] is not None}
    lines = []
    for mode, p in peak.items():
        line = {"mode": mode, "max_concurrency": p["max_concurrency"]}
        b = best.get(mode)
        if b is not None:
            line.update({k: b[k] for k in ("C", "tokens_per_s", "tpot_ms_median", "step_ms_median", "x_floor")})
            if "x_serial" in b:
                line["x_serial"] = b["x_serial"]
            for other in ("recurrent", "plain"):
                if other in best and other != mode:
                    line[f"vs_{other}"] = b["tokens_per_s"] / best[other]["tokens_per_s"]
        lines.append(line)
    return lines


def tables(payload: dict) -> str:
    ok = [r for r in payload["rows"] if "tokens_per_s" in r]
    out = [format_table(ok, ROW_COLS)]
    bad = [r for r in payload["rows"] if "tokens_per_s" not in r]
    out += [f"C={r['C']} {r['mode']}: {'does not fit' if r.get('oom') else r.get('error')}" for r in bad]
    if payload.get("peak"):
        ctx = payload["peak_context"]
        out.append(f"\npeak throughput in {payload['peak_budget_bytes'] / 2**30:.1f} GiB, {ctx} tokens of context "
                   "per request:")  # fmt: skip
        out.append(format_table(payload["peak_summary"], PEAK_COLS))
    return "\n".join(out)


def plot(path, payload: dict, modes, title: str) -> None:
    from .report import plot_lines

    ok = [r for r in payload["rows"] if "tokens_per_s" in r]
    series = [(m, NAMES.get(m, m)) for m in modes]
    panels = []
    for key, name in (("tokens_per_s", "output tokens/s"), ("tpot_ms_median", "median TPOT (ms)"),
                      ("x_floor", "step time / floor")):  # fmt: skip
        rows = [{"C": r["C"], r["mode"]: r[key]} for r in ok]
        panels.append((name, rows, series))
    plot_lines(path, panels, "C", "", title)
