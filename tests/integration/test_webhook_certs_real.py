"""The webhook certificate kept in a Secret, on a real API server: made once, shared by every later
leader, renewed when due."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sluice.operator import webhook_certs
from sluice.operator.kube import Kube

pytestmark = pytest.mark.integration

NAMES = ["sluice-operator-webhook.ns.svc"]


def test_the_certificate_is_made_once_then_reused_then_renewed(
    kube: Any, namespace: str, tmp_path: Path
) -> None:
    k = Kube(kube.api)
    first = webhook_certs.ensure(k, namespace, "hook-tls", NAMES, tmp_path / "a")
    secret = k.get("Secret", namespace, "hook-tls")
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    stored = base64.b64decode(secret["data"]["tls.crt"])
    assert first.certfile.read_bytes() == stored == first.cafile.read_bytes()

    # the next leader (another directory, the same Secret) serves the same certificate
    second = webhook_certs.ensure(k, namespace, "hook-tls", NAMES, tmp_path / "b")
    assert second.certfile.read_bytes() == stored
    unchanged = (k.get("Secret", namespace, "hook-tls") or {})["metadata"]["resourceVersion"]
    assert unchanged == secret["metadata"]["resourceVersion"]

    # 340 days on, it is within the renewal window: a new one replaces it in the Secret
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=340)
    third = webhook_certs.ensure(k, namespace, "hook-tls", NAMES, tmp_path / "b", now=later)
    renewed = base64.b64decode((k.get("Secret", namespace, "hook-tls") or {})["data"]["tls.crt"])
    assert renewed != stored and third.certfile.read_bytes() == renewed
    assert webhook_certs.renewal_reason(renewed, NAMES, dt.datetime.now(dt.UTC)) is None
