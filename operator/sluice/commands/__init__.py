"""Subcommands of the sluice CLI (one module each)."""
