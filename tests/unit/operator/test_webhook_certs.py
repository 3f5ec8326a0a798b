"""The webhook certificate the operator keeps in a Secret: when it is made anew, and what is written."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

from sluice.operator import webhook_certs
from sluice.operator.handlers.admission import self_signed_certificate

NAMES = ["w.sluice-system.svc", "w.sluice-system.svc.cluster.local"]


def test_a_fresh_certificate_naming_every_host_is_kept() -> None:
    cert, _ = self_signed_certificate(NAMES, days=365)
    now = dt.datetime.now(dt.UTC)
    assert webhook_certs.renewal_reason(cert, NAMES, now) is None


def test_missing_garbage_expiring_or_other_hosts_are_renewed() -> None:
    now = dt.datetime.now(dt.UTC)
    assert webhook_certs.renewal_reason(None, NAMES, now) == "no certificate yet"
    assert "does not load" in str(webhook_certs.renewal_reason(b"not a certificate", NAMES, now))
    soon, _ = self_signed_certificate(NAMES, days=20)  # within the 30 days before expiry
    assert "expires at" in str(webhook_certs.renewal_reason(soon, NAMES, now))
    other, _ = self_signed_certificate(["other.svc"], days=365)
    assert webhook_certs.renewal_reason(other, NAMES, now) == f"it does not name {', '.join(NAMES)}"
    # renewal comes in time: a year's certificate is due 30 days before its end
    year, _ = self_signed_certificate(NAMES, days=365)
    assert webhook_certs.renewal_reason(year, NAMES, now + dt.timedelta(days=334)) is None
    assert webhook_certs.renewal_reason(year, NAMES, now + dt.timedelta(days=336)) is not None


def test_the_secret_is_a_tls_secret_whose_ca_is_the_certificate_itself(tmp_path: Path) -> None:
    cert, key = self_signed_certificate(NAMES, days=1)
    secret = webhook_certs.secret_manifest("ns", "w-tls", cert, key)
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}  # type: ignore[attr-defined]
    assert data == {"tls.crt": cert, "tls.key": key, "ca.crt": cert}
    served = webhook_certs._write(tmp_path / "d", data)
    assert served.certfile.read_bytes() == cert and served.keyfile.read_bytes() == key
    assert oct(served.keyfile.stat().st_mode & 0o777) == "0o600"
    assert not list((tmp_path / "d").glob("*.partial"))
