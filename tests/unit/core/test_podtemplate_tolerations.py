"""A template's tolerations are added after the operator's own (the drivers' short ones of a lost
node); a template's toleration of the same taint replaces the operator's."""

from __future__ import annotations

from typing import Any

from sluice.core.podtemplate import apply

OWN = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 10,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 10,
    },
]


def tolerations(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    pod = {"spec": {"containers": [], "tolerations": OWN}}
    out: list[dict[str, Any]] = apply(pod, {"spec": {"tolerations": list(extra)}})["spec"]["tolerations"]
    return out


def test_a_templates_tolerations_come_after_the_operators() -> None:
    pool = {"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}
    assert tolerations(pool) == [*OWN, pool]
    assert tolerations() == OWN  # an empty list changes nothing


def test_the_same_taint_in_a_template_replaces_the_operators_toleration() -> None:
    patient = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 120,
    }
    assert tolerations(patient) == [OWN[0], patient]
    any_effect = {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}
    assert tolerations(any_effect) == [OWN[1], any_effect]
    other_effect = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
    assert tolerations(other_effect) == [*OWN, other_effect]


def test_a_pod_without_tolerations_takes_the_templates_as_they_are() -> None:
    pool = {"key": "dedicated", "operator": "Exists"}
    assert apply({"spec": {"containers": []}}, {"spec": {"tolerations": [pool]}})["spec"]["tolerations"] == [
        pool
    ]
