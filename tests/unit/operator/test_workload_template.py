"""The pod template the operator's builders make is versioned (``WORKLOAD_TEMPLATE``): a change of
the builders reaches running queries through their QueryCluster's rollout, in waves behind the
health gate, never by an operator upgrade alone. This test fails when the driver Deployment a
reference query gets changes while the version stays: bump ``WORKLOAD_TEMPLATE`` in
``operator/sluice/crd/engine.py`` and record the new digest here."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sluice.crd.engine import WORKLOAD_TEMPLATE
from sluice.operator.builders.driver import ENGINE_ENV, driver_deployment

from tests.support.operator_fixtures import cluster_spec, context

#: WORKLOAD_TEMPLATE -> sha256 of the reference driver Deployment (engine digest left out)
DIGESTS = {1: "8d60a600b59ac8aecd72293b95294bbb5df63c1ca636525de35c7aa88259033f",
           # 2: the driver container's memory limit for the runtime (SLUICE_MEMORY_LIMIT, Downward API)
           2: "36a466e10e273acd8ea8e339f0134fd81001f965ff45dac5911f1463fff280d1",
           # 3: the drivers tolerate a lost node 10 s (not 300 s); a checkpoint in an object store (no claim)
           3: "9bae658b5be10986ba34bf5bd61da91e72a7ddc0cec6a9b492c0349e9f43c102",
           # 4: executor pods named after their driver pod; the reference gains a query with executors
           4: "63357176cf9ddad5cb24ea4619ffdc299eb5520de2f6b98789b635aa78a71c5c"}


def reference(**cluster: Any) -> dict[str, Any]:
    # an image named (the default one carries the operator's version, which is no template change)
    ctx = context(cluster=cluster_spec(image="sluice-runtime:reference", **cluster))
    deployment = driver_deployment(ctx, "ab" * 32, "totals-plan-abababababab")
    template = deployment["spec"]["template"]
    template["metadata"]["labels"].pop("sluice.dev/engine")
    container = template["spec"]["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != ENGINE_ENV]
    return deployment


def digest() -> str:
    """Of the reference query in local mode and, since version 4, with executors."""
    both = [reference(), reference(executors=2, storage={"accessMode": "ReadWriteMany"})]
    return hashlib.sha256(json.dumps(both, sort_keys=True).encode()).hexdigest()


def test_a_changed_pod_template_comes_with_a_new_template_version() -> None:
    assert DIGESTS.get(WORKLOAD_TEMPLATE) == digest(), (
        f"the driver pod template changed (digest {digest()}) but WORKLOAD_TEMPLATE is still "
        f"{WORKLOAD_TEMPLATE}: bump it in operator/sluice/crd/engine.py (so that running queries get the "
        f"new template through their QueryCluster's rollout) and record the digest in DIGESTS")


def test_the_engine_a_workload_runs_on_is_in_its_pods() -> None:
    ctx = context()
    pod = driver_deployment(ctx, "ab" * 32, "cm")["spec"]["template"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env[ENGINE_ENV] == ctx.engine_digest and len(ctx.engine_digest) == 64
    assert pod["metadata"]["labels"]["sluice.dev/engine"] == ctx.engine_digest[:12]
