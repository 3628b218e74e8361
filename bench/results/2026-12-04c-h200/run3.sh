# One device call: the official kernel benches of the packed tree (2b45a7f) (carry .peers): T=4 (L=16, B=8..256) and T=2, T=8
# (L=16 and 32), both SGLang releases.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r3; rm -rf $R; mkdir -p $R
timeout 170 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 15 --max-seconds 150 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -6 $R/kernels_T4.log | cut -c1-250
tar -czf $OUT/run3.tgz -C /tmp r3
timeout 300 python3 -m replayssm bench kernels --windows 8 2 --rings 16 32 --batches 8 64 256 --target-ms 10 --max-seconds 270 --tag kernels_T82 --out $R > $R/kernels_T82.log 2>&1; tail -14 $R/kernels_T82.log | cut -c1-250
tar -czf $OUT/run3.tgz -C /tmp r3
