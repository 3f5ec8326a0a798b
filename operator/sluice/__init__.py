"""Sluice: a Kubernetes operator for streaming SQL on Apache Spark."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sluice")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"
