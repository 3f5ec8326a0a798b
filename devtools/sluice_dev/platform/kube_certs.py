"""Certificates and kubeconfigs of the local control plane, made with the ``openssl`` CLI.

Layout under ``<state_dir>/kube/pki/``: ``ca.{crt,key}``, ``apiserver.{crt,key}`` (serving), the
``admin``, ``kube-controller-manager``, ``kube-scheduler``, ``apiserver-kubelet-client`` and
``front-proxy-client`` client certificates, and the service-account key pair ``sa.{key,pub}``.
A ``.complete`` marker is written last, so that a crash half-way through generation (or a newer
layout) leads to a clean regeneration next time.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice_dev.platform.common import PlatformError, run_logged

COMPONENT = "kubernetes"
SERVICE_IP = "10.0.0.1"
#: The real node's IP (``sluice_dev.platform.node.config.node_ip()``, a unit test keeps the two
#: equal; importing it here would be circular), where the API server listens when that node runs.
NODE_IP = "10.242.0.1"
DAYS = "3650"

SERVING_SANS = (
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
    "IP:127.0.0.1",
    f"IP:{SERVICE_IP}",
    f"IP:{NODE_IP}",
)
#: What ``.complete`` holds: a certificate set of an older layout is regenerated.
LAYOUT = "2: apiserver SANs with the node IP"

# name -> (common name, organisations)
CLIENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
    # The apiserver's identity towards aggregated API servers (request-header authentication).
    "front-proxy-client": ("front-proxy-client", ()),
}


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def crt(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def log_path(self) -> Path:
        return self.dir / "openssl.log"


def _openssl(pki: Pki, *args: str) -> None:
    run_logged(COMPONENT, ["openssl", *args], log_path=pki.log_path, timeout=60)


def _new_key(pki: Pki, path: Path) -> None:
    _openssl(pki, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


def _subject(common_name: str, organisations: Sequence[str]) -> str:
    return "".join(f"/O={org}" for org in organisations) + f"/CN={common_name}"


def issue(
    pki: Pki,
    name: str,
    common_name: str,
    organisations: Sequence[str] = (),
    *,
    server_sans: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Issue ``<name>.crt``/``<name>.key`` signed by the CA: a serving certificate when
    ``server_sans`` is given, a client certificate otherwise. Returns (cert, key)."""
    key, crt, csr = pki.key(name), pki.crt(name), pki.dir / f"{name}.csr"
    ext = pki.dir / f"{name}.ext"
    lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    if server_sans:
        lines += ["extendedKeyUsage=serverAuth,clientAuth", "subjectAltName=" + ",".join(server_sans)]
    else:
        lines += ["extendedKeyUsage=clientAuth"]
    ext.write_text("\n".join(lines) + "\n")
    _new_key(pki, key)
    subject = _subject(common_name, organisations)
    _openssl(pki, "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl(
        pki, "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_crt), "-CAkey", str(pki.ca_key),
        "-set_serial", f"0x{secrets.token_hex(16)}", "-days", DAYS, "-sha256", "-extfile", str(ext),
        "-out", str(crt),
    )
    csr.unlink(missing_ok=True)
    ext.unlink(missing_ok=True)
    return crt, key


def _valid(pki: Pki) -> bool:
    """All files present and the CA still valid for a day."""
    names = ["ca", "apiserver", *CLIENTS]
    expected = [pki.dir / ".complete", pki.sa_key, pki.sa_pub]
    expected += [path for name in names for path in (pki.crt(name), pki.key(name))]
    if not all(path.is_file() for path in expected):
        return False
    if (pki.dir / ".complete").read_text().strip() != LAYOUT:
        return False
    result = subprocess.run(
        ["openssl", "x509", "-checkend", "86400", "-noout", "-in", str(pki.ca_crt)],
        capture_output=True, check=False,
    )
    return result.returncode == 0


def ensure_pki(kube_dir: Path) -> Pki:
    """Reuse the certificates under ``kube_dir/pki`` or (re)generate all of them."""
    pki = Pki(kube_dir / "pki")
    if pki.dir.is_dir() and _valid(pki):
        return pki
    if shutil.which("openssl") is None:
        raise PlatformError(COMPONENT, "the `openssl` command is needed to generate certificates")
    shutil.rmtree(pki.dir, ignore_errors=True)
    pki.dir.mkdir(parents=True)
    _new_key(pki, pki.ca_key)
    _openssl(
        pki, "req", "-x509", "-new", "-key", str(pki.ca_key), "-subj", "/CN=sluice-dev-kubernetes-ca",
        "-days", DAYS, "-sha256",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-out", str(pki.ca_crt),
    )
    issue(pki, "apiserver", "kube-apiserver", server_sans=SERVING_SANS)
    for name, (common_name, organisations) in CLIENTS.items():
        issue(pki, name, common_name, organisations)
    _openssl(pki, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(pki.sa_key))
    pki.sa_key.chmod(0o600)
    _openssl(pki, "pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
    (pki.dir / ".complete").write_text(LAYOUT + "\n")
    return pki


def write_kubeconfig(path: Path, *, server: str, pki: Pki, user: str) -> Path:
    """A kubeconfig for ``server`` authenticating with the ``user`` client certificate.

    Written as JSON (a YAML subset that kubectl, client-go and the Python client all read).
    """
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "sluice-dev", "cluster": {"server": server, "certificate-authority": str(pki.ca_crt)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(pki.crt(user)), "client-key": str(pki.key(user))},
            }
        ],
        "contexts": [{"name": "sluice-dev", "context": {"cluster": "sluice-dev", "user": user}}],
        "current-context": "sluice-dev",
        "preferences": {},
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
