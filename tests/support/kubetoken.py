"""A service account's credentials for a runtime under test (its own token, the API server's CA)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def ca_file(kube: Any, tmp: Path) -> Path:
    """The CA of the test API server (``kube``: the integration fixture), as a file."""
    cluster = yaml.safe_load(kube.kubeconfig.read_text())["clusters"][0]["cluster"]
    if "certificate-authority" in cluster:
        path = Path(cluster["certificate-authority"])
        return path if path.is_absolute() else Path(kube.kubeconfig).parent / path
    path = tmp / "ca.crt"
    path.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    return path
