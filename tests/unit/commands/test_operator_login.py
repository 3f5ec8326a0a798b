"""kopf's login from a kubeconfig: a token kubeconfig (a ServiceAccount's, an exec plugin's) must
authenticate kopf's watches too, not only the operator's own REST client."""

from __future__ import annotations

from pathlib import Path

import yaml
from sluice.commands.operator import make_login


def _kubeconfig(path: Path, user: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://10.242.0.1:6443",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return path


def test_a_token_kubeconfig_gives_kopf_the_token(tmp_path: Path) -> None:
    info = make_login(str(_kubeconfig(tmp_path / "k", {"token": "abc.def"})))()
    assert info.token == "abc.def"
    assert info.server == "https://10.242.0.1:6443"


def test_a_certificate_kubeconfig_gives_no_token(tmp_path: Path) -> None:
    (tmp_path / "c.crt").write_text("x")
    (tmp_path / "c.key").write_text("x")
    user = {"client-certificate": str(tmp_path / "c.crt"), "client-key": str(tmp_path / "c.key")}
    info = make_login(str(_kubeconfig(tmp_path / "k", user)))()
    assert info.token is None and info.certificate_path == str(tmp_path / "c.crt")
