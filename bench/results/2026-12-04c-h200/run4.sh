# One device call: the new GPU test of a retried staged verify with the stream's buffers packed in the keys' rows.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r4; rm -rf $R; mkdir -p $R
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_staged_retry.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
tar -czf $OUT/run4.tgz -C /tmp r4
