"""Sluice data plane: executes pinned plans with PySpark Structured Streaming."""
