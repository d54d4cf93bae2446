"""Throughput benchmarks (run as `python -m benchmarks.<name>`)."""
