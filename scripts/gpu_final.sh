#!/usr/bin/env bash
# One device call: correctness first, then the engine, e2e, drift and kernel benchmarks. Logs to $OUT.
# Usage (on the GPU machine): OUT=dir bash scripts/gpu_final.sh SGLANG_WHEEL
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=${1:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
git rev-parse --short HEAD 2>/dev/null | tee -a $OUT/gpu.txt
(timeout 70 python -m pytest -q tests/ops/test_gpu.py tests/ops/test_snapshots.py \
  "tests/ops/test_chain.py::test_kernel_chain_bitwise" 2>&1 | tail -4) | tee $OUT/pytest_gpu.log
timeout 45 python scripts/gpu_checks.py $OUT --steps 1000 > $OUT/gpu_checks.log 2>&1; tail -2 $OUT/gpu_checks.log
timeout 30 python scripts/diag_chain.py > $OUT/diag_chain.log 2>&1; tail -4 $OUT/diag_chain.log
timeout 90 python scripts/gpu_models.py $OUT --layers 8 > $OUT/gpu_models.log 2>&1; tail -6 $OUT/gpu_models.log
timeout 170 python -m replayssm.cli bench e2e --steps 8 --prompt-len 64 --out $OUT > $OUT/e2e.log 2>&1; tail -18 $OUT/e2e.log
timeout 100 python -m replayssm.cli drift --model tiny --tokens 16384 --every 1024 --prompts 1 --out $OUT \
  > $OUT/drift.log 2>&1; tail -4 $OUT/drift.log
timeout 60 python -m replayssm.cli bench kernels --windows 4 --sglang-wheel "$W" --out $OUT --tag kernels_final \
  > $OUT/kernels.log 2>&1; tail -14 $OUT/kernels.log
