"""The operator in-cluster: ``helm upgrade --install`` of ``charts/sluice`` on the real node.

The chart's operator runs as a pod under the chart's ServiceAccount and RBAC, from the
``sluice-operator`` image that ``make images`` loaded into the node (``IfNotPresent``: never
pulled), with leader election; its namespace enforces the ``restricted`` Pod Security Standard.
Used by ``make deploy`` / ``make demo`` on the real node and by the e2e suite
(``E2E_CLUSTER=node``).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sluice_dev.platform.common import PlatformError, run_logged

COMPONENT = "operator"
REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "sluice"
RELEASE = "sluice"
NAMESPACE = "sluice-system"
#: the Deployment the chart names ``<release>-operator``
DEPLOYMENT = f"{RELEASE}-operator"
#: the Service of the admission webhook: it selects the leader only (``sluice.dev/leader=true``), so
#: the operator's pods are Ready some seconds before anything serves it
WEBHOOK_SERVICE = f"{DEPLOYMENT}-webhook"
#: what every namespace of ours enforces (and so every pod we run must pass)
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def _env(kubeconfig: Path, bin_dir: Path) -> dict[str, str]:
    """kubectl and helm of ``bin_dir`` against ``kubeconfig``."""
    return {"KUBECONFIG": str(kubeconfig), "PATH": str(bin_dir)}


def namespace_manifest(name: str, labels: Mapping[str, str] = RESTRICTED) -> dict[str, object]:
    """A namespace enforcing the ``restricted`` Pod Security Standard."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}


def helm_argv(
    helm: str, *, namespace: str = NAMESPACE, release: str = RELEASE, replicas: int = 2,
    extra: Sequence[str] = (), timeout_seconds: int = 300,
) -> list[str]:
    """``helm upgrade --install`` of the chart, waiting until the operator's pods are ready."""
    return [
        helm, "upgrade", "--install", release, str(CHART), "--namespace", namespace,
        "--set", f"replicaCount={replicas}", "--set", "logFormat=text",
        "--wait", f"--timeout={timeout_seconds}s", *extra,
    ]


def install(
    kubeconfig: Path, bin_dir: Path, log_path: Path, *, namespace: str = NAMESPACE, replicas: int = 2,
    extra: Sequence[str] = (),
) -> None:
    """Install (or upgrade) the chart into ``namespace`` (created enforcing ``restricted``) and wait
    until the operator's Deployment is available and its leader serves the webhook; PlatformError
    naming the log otherwise (with the operator pods' state and last log lines appended to it)."""
    env, kubectl = _env(kubeconfig, bin_dir), str(bin_dir / "kubectl")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    applied = subprocess.run(
        [kubectl, "apply", "-f", "-"], input=json.dumps(namespace_manifest(namespace)),
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )
    if applied.returncode != 0:
        raise PlatformError(COMPONENT, f"cannot create namespace {namespace}: {applied.stderr.strip()}")
    try:
        run_logged(
            COMPONENT, helm_argv(str(bin_dir / "helm"), namespace=namespace, replicas=replicas, extra=extra),
            log_path=log_path, env=env, timeout=360,
        )
        wait_webhook_served(kubeconfig, bin_dir, namespace=namespace)
    except PlatformError:
        with open(log_path, "a") as log:
            for args in (["get", "pods", "-n", namespace, "-o", "wide"],
                         ["logs", "-n", namespace, f"deployment/{DEPLOYMENT}", "--tail=40"]):
                out = subprocess.run([kubectl, *args], capture_output=True, text=True, env=env, check=False)
                log.write(f"$ kubectl {' '.join(args)}\n{out.stdout}{out.stderr}\n")
        raise


def scale(kubeconfig: Path, bin_dir: Path, replicas: int, *, namespace: str = NAMESPACE) -> None:
    """Scale the operator's Deployment (0 stops it; pods of the old replica set are gone on return)."""
    env, kubectl = _env(kubeconfig, bin_dir), str(bin_dir / "kubectl")
    subprocess.run([kubectl, "scale", "deployment", DEPLOYMENT, "-n", namespace, f"--replicas={replicas}"],
                   capture_output=True, text=True, env=env, check=True, timeout=60)
    if replicas == 0:
        subprocess.run([kubectl, "wait", "--for=delete", "pod", "-n", namespace,
                        "-l", "app.kubernetes.io/name=sluice", "--timeout=120s"],
                       capture_output=True, text=True, env=env, check=False, timeout=150)
    else:
        subprocess.run([kubectl, "rollout", "status", f"deployment/{DEPLOYMENT}", "-n", namespace,
                        "--timeout=180s"], capture_output=True, text=True, env=env, check=True, timeout=200)


def available(kubeconfig: Path, bin_dir: Path, *, namespace: str = NAMESPACE) -> bool:
    """Is the chart's operator Deployment there with an available replica, and the webhook served?"""
    out = subprocess.run(
        [str(bin_dir / "kubectl"), "get", "deployment", DEPLOYMENT, "-n", namespace, "-o", "json"],
        capture_output=True, text=True, env=_env(kubeconfig, bin_dir), check=False, timeout=60,
    )
    if out.returncode != 0:
        return False
    if int(json.loads(out.stdout).get("status", {}).get("availableReplicas") or 0) <= 0:
        return False
    return webhook_served(kubeconfig, bin_dir, namespace=namespace)


def webhook_served(kubeconfig: Path, bin_dir: Path, *, namespace: str = NAMESPACE) -> bool:
    """Does a ready endpoint serve the webhook Service (a leader elected and its webhook published)?
    True when the chart has no webhook Service."""
    out = subprocess.run(
        [str(bin_dir / "kubectl"), "get", "endpointslices", "-n", namespace,
         "-l", f"kubernetes.io/service-name={WEBHOOK_SERVICE}", "-o", "json"],
        capture_output=True, text=True, env=_env(kubeconfig, bin_dir), check=False, timeout=60,
    )
    if out.returncode != 0:
        return False
    slices = json.loads(out.stdout).get("items") or []
    if not slices:
        service = subprocess.run(
            [str(bin_dir / "kubectl"), "get", "service", WEBHOOK_SERVICE, "-n", namespace],
            capture_output=True, text=True, env=_env(kubeconfig, bin_dir), check=False, timeout=60,
        )
        return service.returncode != 0  # no Service: nothing to wait for
    return any((e.get("conditions") or {}).get("ready") for s in slices for e in s.get("endpoints") or [])


def wait_webhook_served(kubeconfig: Path, bin_dir: Path, *, namespace: str = NAMESPACE,
                        timeout: float = 120.0) -> None:
    """Wait until the webhook is served (PlatformError after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not webhook_served(kubeconfig, bin_dir, namespace=namespace):
        if time.monotonic() > deadline:
            raise PlatformError(COMPONENT, f"no operator serves the webhook Service {namespace}/"
                                f"{WEBHOOK_SERVICE} {timeout:.0f}s after the chart's pods were ready")
        time.sleep(1.0)
