# One device call: base (main at 7caa743's replayssm/, in .base) vs the one-launch verify with its window terms
# computed while the first chunks are in flight; if it is faster at T=4 B=256, the official kernel bench and the GPU
# tests of the same tree. Everything also packed into $OUT/run3.tgz (the 8-file limit).
export TRITON_CACHE_DIR=$PWD/.triton-cache/tc
P=bench/results/2026-12-02-h200
mkdir -p /tmp/r3
export POINTS='[[4,16,256],[4,16,128],[4,16,8],[1,16,256],[2,16,256],[8,16,256],[8,32,8],[4,32,256]]'
timeout 150 env TREE=.base OUT=/tmp/r3 python3 $P/ab_probe.py base --save /tmp/base.pt > /tmp/r3/ab3_base.log 2>&1; grep "^base:" /tmp/r3/ab3_base.log | sort -u
timeout 150 env OUT=/tmp/r3 python3 $P/ab_probe.py new --compare /tmp/base.pt > /tmp/r3/ab3_new.log 2>&1; grep "^new:" /tmp/r3/ab3_new.log | sort -u
grep -o '"checkpoint_equal_to_saved": [a-z]*' /tmp/r3/ab3_new.log | sort | uniq -c
WIN=$(python3 -c "
import json; b=json.load(open('/tmp/r3/ab_base.json')); n=json.load(open('/tmp/r3/ab_new.json'))
f=lambda r:[x for x in r if (x['T'],x['L'],x['B'])==(4,16,256)][0]['replay_random_us']
ok=all(x.get('checkpoint_equal_to_saved') for x in n)
print(int(ok and f(n) < f(b)))")
echo "win=$WIN"
if [ "$WIN" = 1 ]; then
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > /tmp/r3/gpu_tests3.log 2>&1; tail -1 /tmp/r3/gpu_tests3.log
  for t in test_pool_real_shape.py test_engine.py; do timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> /tmp/r3/gpu_tests3.log 2>&1; tail -1 /tmp/r3/gpu_tests3.log; done
  timeout 110 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 100 --tag kernels_T4 --out /tmp/r3 > /tmp/r3/kernels_T4.log 2>&1; tail -25 /tmp/r3/kernels_T4.log
fi
cp /tmp/r3/*.log $OUT/ 2>/dev/null; tar -czf $OUT/run3.tgz -C /tmp r3; ls /tmp/r3
