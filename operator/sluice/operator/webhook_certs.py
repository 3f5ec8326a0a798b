"""The admission webhook's serving certificate, kept by the operator in a Secret and renewed.

``sluice operator --webhook-secret NAME``: the leading replica reads the Secret (``tls.crt``,
``tls.key``, ``ca.crt``) in its own namespace, makes a new self-signed certificate when the Secret is
missing, unreadable, does not name every host the API server may dial, or expires within
``RENEW_BEFORE``, writes it back, and serves from files it writes under a temporary directory.
Every later leader serves the same certificate (the configuration's CA bundle does not change on a
fail-over), and a thread renews it in time; the server notices the changed files and publishes the
new CA bundle.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from sluice.operator.kube import Kube, KubeError

log = logging.getLogger("sluice.operator.webhook")

VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
#: how often the leader looks at the certificate's expiry
CHECK_EVERY = dt.timedelta(hours=12)
KEYS = ("tls.crt", "tls.key", "ca.crt")


@dataclass(frozen=True)
class Served:
    """The files the webhook server reads."""

    certfile: Path
    keyfile: Path
    cafile: Path


def renewal_reason(cert_pem: bytes | None, hostnames: Collection[str], now: dt.datetime,
                   renew_before: dt.timedelta = RENEW_BEFORE) -> str | None:
    """Why the certificate must be made anew (None: it serves as it is)."""
    if not cert_pem:
        return "no certificate yet"
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        return f"the certificate does not load ({exc})"
    if cert.not_valid_after_utc - renew_before <= now:
        return f"it expires at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "it names no host"
    missing = sorted(set(hostnames) - set(sans.get_values_for_type(x509.DNSName)))
    return f"it does not name {', '.join(missing)}" if missing else None


def secret_manifest(namespace: str, name: str, cert: bytes, key: bytes) -> dict[str, object]:
    data = {k: base64.b64encode(v).decode("ascii") for k, v in zip(KEYS, (cert, key, cert), strict=True)}
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "sluice-operator",
                                "app.kubernetes.io/component": "webhook"}},
        "data": data,
    }


def ensure(kube: Kube, namespace: str, name: str, hostnames: Collection[str], directory: Path,
           now: dt.datetime | None = None) -> Served:
    """The Secret's certificate, made or renewed first when due, written into ``directory``."""
    from sluice.operator.handlers.admission import self_signed_certificate

    now = now or dt.datetime.now(dt.UTC)
    secret = kube.get("Secret", namespace, name)
    data = {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items() if k in KEYS}
    reason = renewal_reason(data.get("tls.crt"), hostnames, now)
    if reason is None and "tls.key" not in data:
        reason = "no key"
    if reason is not None:
        cert, key = self_signed_certificate(hostnames, days=VALIDITY.days)
        desired = secret_manifest(namespace, name, cert, key)
        try:
            if secret is None:
                kube.create(desired)
            else:
                desired["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]  # type: ignore[index]
                kube.replace(desired)
        except KubeError as exc:
            if exc.status != 409:
                raise
            # someone else wrote it in between: use theirs
            return ensure(kube, namespace, name, hostnames, directory, now)
        log.info("admission webhook: new certificate in Secret %s/%s (%s)", namespace, name, reason)
        data = {"tls.crt": cert, "tls.key": key, "ca.crt": cert}
    return _write(directory, data)


def _write(directory: Path, data: dict[str, bytes]) -> Served:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths = []
    for key in KEYS:
        path = directory / key
        partial = path.with_suffix(".partial")
        partial.write_bytes(data.get(key) or data["tls.crt"])
        partial.chmod(0o600)
        partial.replace(path)  # atomic: the server never reads half a file
        paths.append(path)
    return Served(*paths)


def keep_renewed(kube: Kube, namespace: str, name: str, hostnames: Collection[str], directory: Path,
                 stop: threading.Event, every: dt.timedelta = CHECK_EVERY) -> threading.Thread:
    """A thread that renews the certificate when due, until ``stop``."""

    def loop() -> None:
        while not stop.wait(every.total_seconds()):
            try:
                ensure(kube, namespace, name, hostnames, directory)
            except (KubeError, OSError) as exc:
                log.warning("admission webhook: cannot check the certificate in %s/%s: %s",
                            namespace, name, exc)

    thread = threading.Thread(target=loop, daemon=True, name="sluice-webhook-cert")
    thread.start()
    return thread
