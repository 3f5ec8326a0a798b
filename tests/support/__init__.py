"""Helpers shared by the test suites and the benchmarks (import as ``tests.support.<module>``)."""
