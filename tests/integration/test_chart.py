"""The Helm chart lints and installs on a real API server (its CRDs: tests/unit/test_crd_generate.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sluice.operator.builders.rbac import EXECUTOR_RULES, LEASE_RULES
from sluice_dev.platform import kube as kube_component

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "sluice"

pytestmark = pytest.mark.integration


def test_chart_lints_and_installs(kube: object, namespace: str) -> None:
    helm = str(kube_component.provision() / "helm")
    env = kube.env()  # type: ignore[attr-defined]
    lint = subprocess.run([helm, "lint", str(CHART)], capture_output=True, text=True, env=env, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    install = subprocess.run(
        [helm, "install", "sluice", str(CHART), "--namespace", namespace,
         "--set", "watchNamespaces={" + namespace + "}", "--wait=false"],
        capture_output=True, text=True, env=env, check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    kubectl = str(kube.bin_dir / "kubectl")  # type: ignore[attr-defined]
    out = subprocess.run(
        [kubectl, "get", "deployment", "sluice-operator", "-n", namespace, "-o", "json"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    deployment = json.loads(out)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sluice", "operator"]
    assert f"--namespace={namespace}" in container["args"]
    assert deployment["spec"]["replicas"] == 2
    crds = subprocess.run([kubectl, "get", "crd", "-o", "name"], capture_output=True, text=True, env=env,
                          check=True).stdout
    assert "customresourcedefinition.apiextensions.k8s.io/streamingqueries.sluice.dev" in crds
    # the operator's ClusterRole holds every permission the driver Role grants (RBAC forbids
    # granting one it does not hold: the query would never get its Role)
    missing = []
    for rule in (*EXECUTOR_RULES, *LEASE_RULES):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    what = f"{resource}.{group}" if group else resource
                    can = subprocess.run(
                        [kubectl, "auth", "can-i", verb, what, "-n", namespace,
                         f"--as=system:serviceaccount:{namespace}:sluice-operator"],
                        capture_output=True, text=True, env=env, check=False,
                    )
                    if can.stdout.strip() != "yes":
                        missing.append(f"{verb} {what}")
    assert missing == [], f"the chart's ClusterRole lacks what the driver Role grants: {missing}"
