"""Provisioning and lifecycle of the local platform components."""
