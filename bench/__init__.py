"""Benchmarks: ratios against a baseline measured in the same run."""
