"""The table of an A/B folder of ``../2026-12-04-h200/ab_probe.py`` logs (``<tag>_<rep>.log``): per point, each tag's
random step, and at T=4, B=256 its non-flush and flush steps and fold cost per record (us per layer-step).

    python3 ab_table.py DIR [TAG ...]   (default tags: base new)
"""

import glob
import json
import sys
from pathlib import Path


def main(folder: str, tags: list[str]) -> None:
    lines = [ln for f in sorted(glob.glob(f"{folder}/*_[ab].log")) for ln in Path(f).read_text().splitlines()]
    rows = [json.loads(ln.split(" t=")[0]) for ln in lines if ln.startswith("{")]
    for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
        cells = []
        for tag in tags:
            rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
            cells.append(tag + " " + " / ".join(_cell(r) for r in rs))
        print(f"T={T} L={L:>2} B={B:>3} | " + " | ".join(cells))


def _cell(r: dict) -> str:
    out = f"{r['random_us']:.1f}"
    if "flush_us" in r:
        out += f" nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f} fold {r['fold_us_per_record']:.1f}"
    return out


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["base", "new"])
