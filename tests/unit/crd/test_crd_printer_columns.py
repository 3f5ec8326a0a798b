"""``kubectl get sq``: the printer columns read fields the status has, and fit a terminal."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sluice.core.status import SHORT_HASH_LENGTH, with_short_hash
from sluice.crd import KINDS
from sluice.crd.generate import crd_for
from sluice.crd.streamingquery import StreamingQuery, StreamingQueryStatus
from sluice.operator.env import Env, QueryRun
from sluice.operator.metrics import OperatorMetrics

H = "0123456789abcdef" * 4
PLAN = {"hash": H, "version": 2, "configMap": "totals-plan-0123456789ab"}


def schema_at(root: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = root
    for part in json_path.strip(".").split("."):
        node = ((node or {}).get("properties") or {}).get(part)
    return node


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_column_reads_a_field_of_the_schema_of_its_type(kind: Any) -> None:
    version = crd_for(kind)["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        field = schema_at(root, column["jsonPath"])
        assert field is not None, column
        assert field["type"] == column["type"], column


def test_kubectl_get_fits_a_terminal() -> None:
    """A typical row (kubectl pads columns with 3 spaces) stays within 100 characters; the
    driver pod's name comes with -o wide."""
    columns = crd_for(StreamingQuery)["spec"]["versions"][0]["additionalPrinterColumns"]
    row = {"Phase": "UpgradePending", "Plan": H[:SHORT_HASH_LENGTH], "Version": "12", "Upgrade": "RolledBack",
           "Ready": "false", "Output": "pageview-counts-v12", "Age": "23h"}
    shown = [c["name"] for c in columns if not c.get("priority")]
    assert sorted(shown) == sorted(row)
    width = len("pageviews") + sum(3 + max(len(name), len(row[name])) for name in shown)
    assert width <= 100, width


def test_the_short_hash_is_derived_from_the_pinned_plan() -> None:
    status = with_short_hash({"plan": dict(PLAN), "phase": "Running"})
    assert status["plan"]["shortHash"] == H[:12] == PLAN["configMap"][-12:]
    assert with_short_hash(status) is status  # already right: nothing to write
    assert with_short_hash({"phase": "Pending"}) == {"phase": "Pending"}
    stale = with_short_hash({"plan": {**PLAN, "hash": "f" * 64, "shortHash": H[:12]}})
    assert stale["plan"]["shortHash"] == "f" * 12
    model = StreamingQueryStatus.model_validate(status)
    assert model.plan is not None and model.plan.short_hash == H[:12]


class RecordingKube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        self.patches.append(status)
        return {}


def test_every_status_write_that_pins_a_plan_carries_its_short_hash() -> None:
    kube = RecordingKube()
    env = Env(kube=kube, metrics=OperatorMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    body = {"metadata": {"name": "totals", "namespace": "shop", "generation": 1}}
    run = QueryRun(env, body, {})
    assert run.write({"plan": dict(PLAN)})
    assert kube.patches[-1]["plan"]["shortHash"] == H[:12]
    # a query pinned by an operator from before shortHash gets it with its next write
    old = QueryRun(env, body, {"plan": dict(PLAN), "phase": "Running"})
    assert old.write({"cluster": "default"})
    patch = kube.patches[-1]
    assert {k: v for k, v in patch.items() if k != "conditions"} == {"cluster": "default",
                                                                     "plan": {"shortHash": H[:12]}}
    # and the derived ReplanAvailable condition: no re-plan on offer
    assert [(c["type"], c["status"]) for c in patch["conditions"]] == [("ReplanAvailable", "False")]
    assert not old.write({"cluster": "default"})  # nothing left to write
