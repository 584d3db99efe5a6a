"""Reproducible performance suites for plancast: ``python -m benchmarks`` (see README.md)."""
