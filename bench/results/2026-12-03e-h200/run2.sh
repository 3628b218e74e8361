# One device call: the official kernel benches of this tree with both SGLang releases (carry .peers): T=4 at
# B = 8, 64, 128, 256, then T = 8, 2, 1 at L = 16 and 32.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r2; mkdir -p $R
save() { tar -czf $OUT/run2.tgz -C /tmp r2; }
timeout 130 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -4 $R/kernels_T4.log
save
timeout 330 python3 -m replayssm bench kernels --windows 8 2 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 270 --tag kernels_T821 --out $R > $R/kernels_T821.log 2>&1; tail -4 $R/kernels_T821.log
save
