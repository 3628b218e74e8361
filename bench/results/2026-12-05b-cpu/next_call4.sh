# A fourth device call (prepared 2026-12-05, twenty-sixth session, without a device), if the minutes allow: where a
# replay step's time goes at the issue-15 points that miss their targets, per kernel category (torch.profiler over
# three engine steps; ../2026-12-03d-h200/prof_e2e.py, unchanged), 27B geometry, random bf16 weights, random
# acceptance, 1,024 tokens of context: replay C=256 (the peak point, 107 ms a step against a 65 ms floor), replay and
# recurrent C=64. The last such profile (2026-12-01e, 2497c21) put replay C=256 at GEMMs 75.5 of 108 ms busy and the
# verify at 18.2 ms; the kernels have changed since. About 5 minutes.
export PYTHONUNBUFFERED=1
R=/tmp/c4; rm -rf $R; mkdir -p $R
timeout 480 env OUT=$R CONTEXT=1024 PROF="replay:256,replay:64,recurrent:64" \
  python3 bench/results/2026-12-03d-h200/prof_e2e.py > $R/prof.log 2>&1
echo "prof rc=$?"; grep -A12 "^==" $R/prof.log | head -60
cp $R/* $OUT/ 2>/dev/null
