"""Node agent: container environment and ``$(VAR)`` expansion (pure)."""

from __future__ import annotations

import pytest
from sluice_dev.nodeagent import envres

POD = {
    "metadata": {
        "name": "p1",
        "namespace": "ns1",
        "uid": "u-1",
        "labels": {"app": "x", "tier": "a"},
        "annotations": {"note": "hi"},
    },
    "spec": {"nodeName": "n1", "serviceAccountName": "runner", "containers": []},
}
OBJECTS = {
    ("configmap", "ns1", "cfg"): {"A": "1", "B": "two", "bad-key!": "skip"},
    ("secret", "ns1", "sec"): {"PASSWORD": "s3cret"},
}


def lookup(kind: str, namespace: str, name: str) -> dict[str, str] | None:
    return OBJECTS.get((kind, namespace, name))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "1"),
        ("x-$(A)-$(B)", "x-1-two"),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("cost $5", "cost $5"),
        ("$(A", "$(A"),
        ("trailing $", "trailing $"),
        ("", ""),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert envres.expand(text, {"A": "1", "B": "two"}) == expected


def test_resolve_orders_envfrom_then_env_and_expands_against_earlier_values() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec"}, "prefix": "S_"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "B"}}},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASSWORD"}}},
            {"name": "URL", "value": "http://$(POD_IP):8080/$(POD_NAME)?$(UNKNOWN)"},
            {"name": "A", "value": "overridden"},
        ],
    }
    env = envres.resolve(POD, container, pod_ip="127.10.0.7", lookup=lookup, base={"HOME": "/root"})
    assert env["HOME"] == "/root"
    assert env["B"] == "two" and env["S_PASSWORD"] == "s3cret"
    assert "bad-key!" not in env
    assert (env["POD_NAME"], env["POD_IP"], env["NS"], env["SA"], env["NODE"], env["UID"]) == (
        "p1",
        "127.10.0.7",
        "ns1",
        "runner",
        "n1",
        "u-1",
    )
    assert env["APP"] == "x"
    assert env["FROM_CM"] == "two" and env["FROM_SECRET"] == "s3cret"
    assert env["URL"] == "http://127.10.0.7:8080/p1?$(UNKNOWN)"
    assert env["A"] == "overridden"


def test_missing_sources_fail_unless_optional() -> None:
    missing_map = {
        "name": "c",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}],
    }
    with pytest.raises(envres.EnvError, match="nope"):
        envres.resolve(POD, missing_map, pod_ip="", lookup=lookup)
    missing_key = {
        "name": "c",
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}}],
    }
    with pytest.raises(envres.EnvError, match="'k'"):
        envres.resolve(POD, missing_key, pod_ip="", lookup=lookup)
    optional = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "nope", "optional": True}}],
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k", "optional": True}}}],
    }
    assert "X" not in envres.resolve(POD, optional, pod_ip="", lookup=lookup)


def test_resource_field_ref_and_quantities() -> None:
    container = {
        "name": "c",
        "resources": {"limits": {"memory": "1Gi"}, "requests": {"cpu": "500m"}},
        "env": [
            {
                "name": "MEM_MB",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
            {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        ],
    }
    env = envres.resolve(POD, container, pod_ip="", lookup=lookup, allocatable={"cpu": "8"})
    assert env == {"MEM_MB": "1024", "CPU": "1", "CPU_LIMIT": "8"}


def test_field_values_for_volumes() -> None:
    assert envres.field_value(POD, "metadata.labels", "") == 'app="x"\ntier="a"'
    assert envres.field_value(POD, "metadata.annotations['note']", "") == "hi"
    with pytest.raises(envres.EnvError):
        envres.field_value(POD, "spec.bogus", "")


def test_expand_argv_and_secret_decoding() -> None:
    assert envres.expand_argv(["echo", "$(A)", "$$(A)"], {"A": "x"}) == ["echo", "x", "$(A)"]
    assert envres.decode_secret({"data": {"k": "dmFsdWU="}, "stringData": {"s": "plain"}}) == {
        "k": "value",
        "s": "plain",
    }
