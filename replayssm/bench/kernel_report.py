"""Derived columns, the printed table and the plot of ``replayssm bench kernels``."""

from __future__ import annotations

from .backends import OURS

_TIMES = ("recurrent_us", "replay_random_us", "replay_nonflush_us", "replay_flush_us")


def derive(row: dict, impls: list[str]) -> dict:
    """Adds ``{impl}/{time}_x_floor`` for every time, ``{impl}/replay_nonflush_x_read_floor`` (the non-flush step
    over what it must read), ``replayssm/speedup_vs_recurrent`` (our recurrent
    / our replay), ``replayssm/speedup_vs_{peer}`` (peer replay / our replay),
    ``replayssm/recurrent_vs_{peer}`` (our recurrent / peer recurrent; target <= 1.05), and the same
    two against the fastest peer (``..._fastest_peer``)."""
    for impl in impls:
        for t in _TIMES:
            if f"{impl}/{t}" in row:
                row[f"{impl}/{t.removesuffix('_us')}_x_floor"] = row[f"{impl}/{t}"] / row["floor_us"]
        if f"{impl}/replay_nonflush_us" in row and "nonflush_read_floor_us" in row:
            row[f"{impl}/replay_nonflush_x_read_floor"] = (
                row[f"{impl}/replay_nonflush_us"] / row["nonflush_read_floor_us"]
            )
    ours_replay, ours_rec = row.get(f"{OURS}/replay_random_us"), row.get(f"{OURS}/recurrent_us")
    if ours_replay and ours_rec:
        row[f"{OURS}/speedup_vs_recurrent"] = ours_rec / ours_replay
    for impl in impls:
        if impl == OURS:
            continue
        if ours_replay and f"{impl}/replay_random_us" in row:
            row[f"{OURS}/speedup_vs_{impl}"] = row[f"{impl}/replay_random_us"] / ours_replay
        if ours_rec and f"{impl}/recurrent_us" in row:
            row[f"{OURS}/recurrent_vs_{impl}"] = ours_rec / row[f"{impl}/recurrent_us"]
    peers = [i for i in impls if i != OURS]
    best_replay = min((row[f"{i}/replay_random_us"] for i in peers if f"{i}/replay_random_us" in row), default=None)
    best_rec = min((row[f"{i}/recurrent_us"] for i in peers if f"{i}/recurrent_us" in row), default=None)
    if ours_replay and best_replay:
        row[f"{OURS}/speedup_vs_fastest_peer"] = best_replay / ours_replay
    if ours_rec and best_rec:
        row[f"{OURS}/recurrent_vs_fastest_peer"] = ours_rec / best_rec
    return row


def short(impl: str) -> str:
    return "ours" if impl == OURS else impl.removeprefix("sglang-")


def table_columns(impls: list[str]) -> list[tuple[str, str, str]]:
    """(key, title, format) of the printed table: times of every backend, floor, our x floor, fold costs,
    our speedup over the fastest peer ReplaySSM and our recurrent over the fastest peer recurrent."""
    cols = [("T", "T", "d"), ("L", "L", "d"), ("B", "B", "d")]
    cols += [(f"{i}/recurrent_us", f"rec {short(i)}", ".1f") for i in impls]
    cols += [(f"{i}/replay_random_us", f"rep {short(i)}", ".1f") for i in impls]
    cols += [("floor_us", "floor", ".1f"), (f"{OURS}/replay_random_x_floor", "ours xfl", ".2f")]
    cols += [(f"{i}/fold_us_per_record", f"fold/rec {short(i)}", ".1f") for i in impls]
    if len(impls) > 1:
        cols += [(f"{OURS}/speedup_vs_fastest_peer", "x best sgl", ".2f"),
                 (f"{OURS}/recurrent_vs_fastest_peer", "rec/sgl", ".2f")]  # fmt: skip
    return cols


def plot_panels(rows: list[dict], impls: list[str]) -> list[tuple[str, list[dict], list[tuple[str, str]]]]:
    """One panel per (T, L): recurrent and replay of every backend, and the floor, against B."""
    series = [(f"{i}/recurrent_us", f"recurrent ({i})") for i in impls]
    series += [(f"{i}/replay_random_us", f"ReplaySSM ({i})") for i in impls] + [("floor_us", "floor")]
    keys = sorted({(r["T"], r["L"]) for r in rows})
    return [(f"T={T}, L={L}", [r for r in rows if (r["T"], r["L"]) == (T, L)], series) for T, L in keys]


def point_line(row: dict, impls: list[str]) -> str:
    """One printed line per point, written as it completes."""
    parts = []
    for i in impls:
        times = [f"{k.split('_')[0]} {row[f'{i}/{k}']:.1f}" for k in ("recurrent_us", "replay_random_us")
                 if f"{i}/{k}" in row]  # fmt: skip
        if times:
            parts.append(f"{short(i)} " + ", ".join(times))
    parts.append(f"floor {row['floor_us']:.1f} us")
    if row["refused"]:  # each with its gate's reason (a raise there is often a shape the backend does not take)
        why = [f"{b} ({row.get('gates', {}).get(b, {}).get('reason', 'gate failed')[:100]})" for b in row["refused"]]
        parts.append("REFUSED, not timed: " + ", ".join(why))
    if row.get("errors"):
        parts.append("ERROR while timing: " + ", ".join(row["errors"]))
    return f"T={row['T']} L={row['L']} B={row['B']} ({row['wall_s']:.1f} s): " + " | ".join(parts)
