# One device call: the official T=8/2/1 kernel bench of this tree (v2, the code that lands) with both SGLang releases.
export TRITON_CACHE_DIR=/tmp/tc
R=/tmp/r3; mkdir -p $R
timeout 560 python3 -m replayssm bench kernels --windows 8 2 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 420 --tag kernels_T821 --out $R > $R/kernels_T821.log 2>&1; tail -22 $R/kernels_T821.log
tar -czf $OUT/run3.tgz -C /tmp r3; ls $R
