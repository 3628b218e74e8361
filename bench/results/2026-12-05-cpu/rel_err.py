"""Relative L2 error of tag B's traces against tag A's (``../2026-12-04-h200/ab_probe.py`` writes trace_<tag>_T_L_B.pt:
outputs [12, ...] and committed states [2, ...]), for probes that are not bitwise: a probe must compute real values.

    python3 rel_err.py DIR A B
"""

import glob
import os
import sys

import torch


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / a.norm().clamp_min(1e-30))


def main(folder: str, a: str, b: str) -> int:
    bad = 0
    for pa in sorted(glob.glob(os.path.join(folder, f"trace_{a}_*.pt"))):
        pb = pa.replace(f"trace_{a}_", f"trace_{b}_")
        (oa, sa), (ob, sb) = torch.load(pa), torch.load(pb)
        finite = bool(torch.isfinite(ob).all() and torch.isfinite(sb).all())
        eo, es = rel(oa, ob), rel(sa, sb)
        bad += not finite or es > 1e-4 or eo > 1e-2
        print(f"{os.path.basename(pb)}: finite {finite}, outputs {eo:.2e}, committed states {es:.2e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
