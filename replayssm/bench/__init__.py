"""Benchmarks: our kernels beside peer implementations (SGLang 0.5.16 and 0.5.23, ``bench/peers``)."""
