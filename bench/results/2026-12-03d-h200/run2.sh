# One device call on this tree (the fold moved to ops/verify_fold.py and the launch choices to ops/verify_launch.py,
# the main kernel's SASS identical to e481c05's): the kernels' and the engine's GPU tests; a
# per-kernel profile of engine steps at C=64 (27B shape; prof_e2e.py from 2026-12-01e, unchanged); the 35B-A3B MoE
# shape end to end with graphs (issue 15), the same command as its last run (2026-12-01e, an earlier build).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03d-h200
R=/tmp/r2; mkdir -p $R
save() { tar -czf $OUT/run2.tgz -C /tmp r2; }
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_real_shape.py tests/gpu/test_engine.py > $R/gpu_tests.log 2>&1; tail -2 $R/gpu_tests.log
save
timeout 150 env OUT=$R PROF=replay:64,recurrent:64,plain:64 python3 $D/prof_e2e.py > $R/prof_e2e.log 2>&1; grep -A9 "^==" $R/prof_e2e.log | head -40
save
timeout 230 python3 -m replayssm bench e2e --preset qwen3.5-35b-a3b --concurrency 8 64 128 --steps 16 --prompt-len 64 --no-phases --out $R --tag e2e_35b_a3b > $R/e2e_35b_a3b.log 2>&1; tail -12 $R/e2e_35b_a3b.log
save
