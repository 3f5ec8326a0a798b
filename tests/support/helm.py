"""The Helm chart in tests: ``helm template`` / ``lint`` / ``install`` with the platform's helm, and
a kubeconfig that authenticates as a ServiceAccount (``sluice operator`` runs under it as a local
process: ``tests.support.operator_process.OperatorProcess.with_kubeconfig``).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from sluice_dev.platform.chart import CHART


def helm_binary() -> Path:
    """The helm the platform builds (with kubectl and the control plane; cached after the first)."""
    from sluice_dev.platform import kube as kube_component

    return kube_component.provision() / "helm"


def helm(*args: str, env: dict[str, str] | None = None, timeout: float = 120
         ) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` (never raises on a non-zero exit: the caller looks at the result)."""
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, env=env,
                          check=False, timeout=timeout)


def set_args(values: dict[str, str]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def render(values: dict[str, str] | None = None, *, release: str = "rel",
           namespace: str = "sluice-system") -> list[dict[str, Any]]:
    """The objects ``helm template`` makes of the chart with ``--set`` ``values`` (the test pod too)."""
    out = helm("template", release, str(CHART), "--namespace", namespace, *set_args(values or {}))
    assert out.returncode == 0, out.stdout + out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def only(objects: Sequence[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} in {[o['kind'] for o in objects]}"
    return found[0]


def kinds(objects: Sequence[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


@contextmanager
def installed(kube: Any, release: str, namespace: str, values: dict[str, str] | None = None
              ) -> Iterator[subprocess.CompletedProcess[str]]:
    """``helm install`` into ``namespace`` (not waiting: no node runs pods); uninstalled afterwards,
    so that the cluster-scoped objects (ClusterRole, ClusterRoleBinding) go too."""
    env = kube.env()
    out = helm("install", release, str(CHART), "--namespace", namespace, "--wait=false",
               *set_args(values or {}), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        yield out
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait=false", env=env)


def kubectl(kube: Any, *args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(kube.bin_dir / "kubectl"), *args], capture_output=True, text=True,
                         env=kube.env(), input=stdin, check=False, timeout=60)
    if check:
        assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stdout}{out.stderr}"
    return out


def can_i(kube: Any, who: str | Path, verb: str, what: str, *scope: str) -> bool:
    """``kubectl auth can-i VERB WHAT SCOPE`` (scope: ``-n NS`` or ``-A``) as ``who``: a user name
    (impersonated by the admin) or a kubeconfig (its own credentials)."""
    as_who = f"--kubeconfig={who}" if isinstance(who, Path) else f"--as={who}"
    out = kubectl(kube, "auth", "can-i", verb, what, *scope, as_who, check=False)
    return out.stdout.strip() == "yes"


def whoami(kube: Any, kubeconfig: Path) -> dict[str, Any]:
    """The user the API server sees for ``kubeconfig`` (SelfSubjectReview)."""
    out = kubectl(kube, "auth", "whoami", f"--kubeconfig={kubeconfig}", "-o", "json").stdout
    info: dict[str, Any] = json.loads(out)["status"]["userInfo"]
    return info


def service_account_kubeconfig(kube: Any, namespace: str, name: str, path: Path) -> Path:
    """A kubeconfig for the test run's API server that authenticates with a token of the
    ServiceAccount ``namespace/name`` (``kubectl create token``): what the pod would be."""
    token = kubectl(kube, "create", "token", name, "-n", namespace, "--duration=1h").stdout.strip()
    return _write_kubeconfig(kube, path, namespace, {"token": token})


def _write_kubeconfig(kube: Any, path: Path, namespace: str, user: dict[str, str]) -> Path:
    admin = yaml.safe_load(Path(kube.kubeconfig).read_text())
    cluster = dict(admin["clusters"][0]["cluster"])
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():  # relative to the admin kubeconfig's folder
        cluster["certificate-authority"] = str(Path(kube.kubeconfig).parent / ca)
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": "sa", "user": user}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": "sa", "namespace": namespace}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def http_get(url: str, timeout: float = 3) -> tuple[int, str]:
    """Status and body of a GET (an HTTP error status is returned, not raised)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
