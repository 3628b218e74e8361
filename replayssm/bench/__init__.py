"""Benchmarks: our kernels against peer implementations (SGLang 0.5.16's kernels loaded from its wheel)."""
