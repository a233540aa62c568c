"""Benchmarks: scripts that print figures (python -m bench.<name>); see bench/common.py."""
