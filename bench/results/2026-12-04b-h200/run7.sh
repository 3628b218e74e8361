# One device call: the official plain-decode bench of 4c4de4a (carry .peers): T=1, L=16 and 32, B=128 and 256.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r7; rm -rf $R; mkdir -p $R
timeout 200 python3 -m replayssm bench kernels --windows 1 --rings 16 32 --batches 128 256 --target-ms 15 --max-seconds 150 --tag kernels_T1 --out $R > $R/kernels_T1.log 2>&1; tail -12 $R/kernels_T1.log | cut -c1-220
tar -czf $OUT/run7.tgz -C /tmp r7
