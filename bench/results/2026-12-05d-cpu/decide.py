"""Does DIF mode 2 win the A/B of call_a.sh? Reads the ab_probe logs in DIR (``<tag>_<rep>.log``): m2 wins where its
fold per record (T=4, L=16, B=256, mean of its runs) is at least 2% below base's and its random step is no more than
0.5% above base's at every point. Prints the comparison; exit status 0 if m2 wins, 1 if not."""

import glob
import json
import sys
from pathlib import Path
from statistics import mean

rows = [json.loads(ln.split(" t=")[0]) for f in glob.glob(f"{sys.argv[1]}/*_[ab].log")
        for ln in Path(f).read_text().splitlines() if ln.startswith("{")]  # fmt: skip


def avg(tag, key, T=4, L=16, B=256):
    vals = [r[key] for r in rows if (r["tag"], r["T"], r["L"], r["B"]) == (tag, T, L, B) and key in r]
    return mean(vals) if vals else float("nan")


fold = {t: avg(t, "fold_us_per_record") for t in ("base", "m2")}
rand = {(t, B): avg(t, "random_us", B=B) for t in ("base", "m2") for B in (256, 128)}
timed = [B for B in (256, 128) if rand["base", B] == rand["base", B] and rand["m2", B] == rand["m2", B]]  # not NaN
wins = fold["m2"] < 0.98 * fold["base"] and all(rand["m2", B] <= 1.005 * rand["base", B] for B in timed)
verdict = "wins" if wins else "does not win"
print(
    f"fold/record base {fold['base']:.2f} m2 {fold['m2']:.2f}; random B=256 base {rand['base', 256]:.1f} m2 "
    f"{rand['m2', 256]:.1f}; B=128 base {rand['base', 128]:.1f} m2 {rand['m2', 128]:.1f} -> m2 {verdict}"
)
sys.exit(0 if wins else 1)
