# One device call: ncu source counters of the pure-flush verify kernel as on main (T=4, L=16, B=256, one layer;
# ../2026-12-01c-h200/fold_probe.py), to find the instructions behind the ~32M shared-memory bank conflicts that the
# folding programs' window work adds (run 11): SASS with per-instruction counters, CSV, and the top instructions by
# excess shared wavefronts.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
NCU=/usr/local/cuda/bin/ncu
P=$PWD/bench/results/2026-12-01c-h200/fold_probe.py
R=/tmp/r12; mkdir -p $R
save() { tar -czf $OUT/run12.tgz -C /tmp r12; }
timeout 150 $NCU --clock-control none --kernel-name regex:_gdn_replay_verify_kernel --launch-skip 40 --launch-count 1 --section SourceCounters -o $R/rep python3 $P flush > $R/ncu.txt 2>&1
tail -2 $R/ncu.txt
$NCU --import $R/rep.ncu-rep --page source --csv --print-source sass > $R/src_sass.csv 2>&1
$NCU --import $R/rep.ncu-rep --page source --csv --print-source cuda,sass > $R/src_cuda_sass.csv 2>&1
$NCU --import $R/rep.ncu-rep --page details > $R/details.txt 2>&1
rm -f $R/rep.ncu-rep
save
python3 - <<'PY'
import csv, io
rows = list(csv.reader(open("/tmp/r12/src_sass.csv")))
hdr = None
for i, r in enumerate(rows):
    if any("Source" == c or "Address" == c for c in r):
        hdr = i; break
h = rows[hdr]; print(h)
cols = [j for j, c in enumerate(h) if "Shared" in c and ("Excessive" in c or "Conflict" in c)]
print("cols", [h[j] for j in cols])
data = rows[hdr + 1:]
def num(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0
if cols:
    c = cols[0]
    top = sorted(range(len(data)), key=lambda k: -num(data[k][c]))[:20]
    for k in top:
        print(k, data[k][c], " | ".join(data[k][:3])[:160])
PY
save
