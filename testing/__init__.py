"""Helpers for tests and benchmarks only: tiny models, a local service in a child process, synthetic pairs."""
