"""Execution plans: a JSON DAG of typed, versioned steps."""
