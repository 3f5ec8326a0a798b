"""Identity and naming: stable, DNS-safe, bounded, collision-free."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sluice.core.naming import MAX_BASE, QueryIdentity, QueryNames, dns_label

LABEL = re.compile(r"^[a-z]([a-z0-9-]*[a-z0-9])?$")


def ident(**kw: object) -> QueryIdentity:
    args: dict = {"service_id": "shop", "namespace": "prod", "name": "revenue", "uid": "abcdef12-3456",
                  "plan_version": 1}
    args.update(kw)
    return QueryIdentity(**args)


def test_valid_short_names_are_kept() -> None:
    assert dns_label("revenue") == "revenue"
    assert QueryNames.for_query("revenue").driver == "revenue-driver"


@pytest.mark.parametrize("name", [
    "Revenue", "rev.enue", "a" * 200, "1revenue", "x--y", "-a-", "über", "a.b.c.d.e.f.g.h" * 10,
])
def test_awkward_names_become_valid_labels(name: str) -> None:
    label = dns_label(name, MAX_BASE)
    assert LABEL.match(label), label
    assert len(label) <= MAX_BASE


@given(st.text(min_size=1, max_size=300))
def test_any_text_gives_a_valid_bounded_label(name: str) -> None:
    label = dns_label(name, MAX_BASE)
    assert LABEL.match(label), label
    assert len(label) <= MAX_BASE


def test_distinct_long_names_do_not_collide() -> None:
    a = "q" * 100 + "a"
    b = "q" * 100 + "b"
    assert dns_label(a, MAX_BASE) != dns_label(b, MAX_BASE)
    assert dns_label("Rev", MAX_BASE) != dns_label("rev", MAX_BASE)


def test_derived_names_fit_kubernetes_limits() -> None:
    names = QueryNames.for_query("x" * 253)
    for derived in (names.driver, names.state_claim, names.metrics_service, names.service_account,
                    names.role, names.role_binding, names.pdb, names.plan_config_map("a" * 64)):
        assert LABEL.match(derived), derived
        assert len(derived) <= 63, derived
    # the driver Deployment's ReplicaSet is "<deployment>-<pod-template-hash, <= 10 chars>"
    assert len(names.driver) + 11 <= 63


def test_plan_config_map_is_named_after_the_hash() -> None:
    names = QueryNames.for_query("revenue")
    assert names.plan_config_map("0123456789abcdef" * 4) == "revenue-plan-0123456789ab"
    with pytest.raises(ValueError):
        names.plan_config_map("not-a-hash")


def test_kafka_ids_and_checkpoint_are_prefixed_by_service_id_and_versioned() -> None:
    i = ident()
    assert i.consumer_group == "shop.prod.revenue.v1"
    assert i.transactional_id == "shop.prod.revenue.v1.tx"
    assert i.checkpoint_path == "/var/lib/sluice/state/shop/prod/revenue/v1"
    v2 = ident(plan_version=2)
    assert v2.consumer_group != i.consumer_group
    assert v2.checkpoint_path != i.checkpoint_path
    assert v2.versioned_topic("out") == "out-v2" and i.versioned_topic("out") == "out"


def test_recreated_object_keeps_kafka_ids_but_not_query_id() -> None:
    a, b = ident(uid="11111111-aaaa"), ident(uid="22222222-bbbb")
    assert a.consumer_group == b.consumer_group and a.checkpoint_path == b.checkpoint_path
    assert a.query_id != b.query_id


def test_ids_differ_across_services_and_namespaces() -> None:
    base = ident()
    assert ident(service_id="other").consumer_group != base.consumer_group
    assert ident(namespace="dev").transactional_id != base.transactional_id


@pytest.mark.parametrize("bad", [{"plan_version": 0}, {"service_id": ""}, {"name": ""}])
def test_invalid_identity(bad: dict) -> None:
    with pytest.raises(ValueError):
        ident(**bad)
