"""Reasons say what really changed: steps matched by place, columns by meaning, spec outside the plan."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from sluice.core.classify import classify
from sluice.core.classify.match import match
from sluice.core.classify.runtime import runtime_changes, runtime_settings
from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan

from tests.support.upgrade_corpus import CORPUS, load, pair_files

JOIN = "JOIN payments p ON o.order_id = p.order_id AND p.pts BETWEEN o.ts AND o.ts + INTERVAL 10 MINUTES"


def _spec(sql: str, mode: str = "append", **extra: Any) -> dict[str, Any]:
    """The spec of corpus pair 18 (orders and payments, watermarked) with another SQL text."""
    doc = yaml.safe_load((CORPUS / "18-join-inner-to-left-outer.yaml").read_text())
    spec = copy.deepcopy(doc["old"]["spec"])
    spec["sql"] = sql
    spec["sink"]["outputMode"] = mode
    spec.update(extra)
    return dict(spec)


def _plan(spec: dict[str, Any]) -> Plan:
    manifest = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery", "metadata": {"name": "q"}}
    return compile_query(parse_manifest(yaml.safe_dump({**manifest, "spec": spec})).spec)


def _no_claim_without_difference(changes: list[Any]) -> None:
    """No change has equal old and new values (the reason would claim a change that is not one)."""
    for c in changes:
        assert c.old != c.new, c


def test_subquery_in_front_of_a_join_reports_only_real_changes() -> None:
    old = _plan(_spec(f"SELECT o.order_id, o.customer, p.paid FROM orders o {JOIN}"))
    new = _plan(
        _spec(
            f"SELECT o.order_id, o.customer, p.paid FROM (SELECT order_id, customer, ts FROM orders) o {JOIN}"
        )
    )
    d = classify(old, new)
    # the join now buffers fewer columns of each order: a real state change
    assert (d.category, d.decision) == ("topology", "replace")
    fields = {(c.step, c.field) for c in d.changes}
    assert ("join-1", "leftInput") in fields
    # the keys and the time range read the same columns as before: not reported
    assert ("join-1", "keys") not in fields and ("join-1", "timeCondition") not in fields
    # the final projection is compared with the final projection (project-2 now), not with the
    # subquery's projection that took its id: no phantom expression changes
    assert not any(c.field.startswith("expressions") for c in d.changes), d.reasons
    added = [c for c in d.changes if c.field == "steps"]
    assert [(c.step, c.new) for c in added] == [("project-1", "projectV1")]
    _no_claim_without_difference(d.changes)
    assert not any("join keys changed" in r for r in d.reasons)


def test_pass_through_subquery_in_front_of_a_join_keeps_the_state() -> None:
    cols = "order_id, customer, seller, region, amount, qty, ts"
    old = _plan(_spec(f"SELECT o.order_id, o.customer, p.paid FROM orders o {JOIN}"))
    new = _plan(_spec(f"SELECT o.order_id, o.customer, p.paid FROM (SELECT {cols} FROM orders) o {JOIN}"))
    d = classify(old, new)
    assert d.decision in ("none", "in-place"), d.reasons


def test_swapped_aggregate_names_are_reported_as_such() -> None:
    old = _plan(
        _spec("SELECT customer, count(*) AS n, sum(qty) AS s FROM orders GROUP BY customer", "update")
    )
    new = _plan(
        _spec("SELECT customer, count(*) AS s, sum(qty) AS n FROM orders GROUP BY customer", "update")
    )
    d = classify(old, new)
    # the state (one count and one sum per customer, in this order) is unchanged
    assert (d.category, d.decision) == ("schema-evolution", "in-place")
    by_field = {c.field: c for c in d.changes}
    assert by_field["outputSchema.n"].old == "COUNT(*)"
    assert by_field["outputSchema.n"].new == "SUM(orders.qty)"
    assert by_field["outputSchema.s"].old == "SUM(orders.qty)"
    assert by_field["outputSchema.s"].new == "COUNT(*)"
    text = "\n".join(d.reasons)
    assert "'n' now holds 'SUM(orders.qty)'" in text and "'s' now holds 'COUNT(*)'" in text
    # not claimed as a mere reordering of unchanged columns
    assert "outputSchema.order" not in by_field
    _no_claim_without_difference(d.changes)


def test_redefined_column_under_the_same_name_is_reported() -> None:
    old = _plan(_spec("SELECT customer, sum(qty) AS n FROM orders GROUP BY customer", "update"))
    new = _plan(_spec("SELECT customer, sum(qty) AS n FROM orders GROUP BY customer", "update"))
    assert classify(old, new).decision == "none"
    old = _plan(_spec("SELECT order_id, amount AS v FROM orders"))
    new = _plan(_spec("SELECT order_id, amount * 2 AS v FROM orders"))
    d = classify(old, new)
    assert d.decision == "in-place"
    change = next(c for c in d.changes if c.field == "outputSchema.v")
    assert (change.old, change.new) == ("orders.amount", "orders.amount * 2")


def test_same_text_upstream_change_names_what_is_read() -> None:
    pair = load(CORPUS / "13-group-by-upstream-expression.yaml")
    d = classify(*pair.plans())
    keys = next(c for c in d.changes if c.field == "keys")
    assert (keys.old, keys.new) == (["orders.customer"], ["orders.seller"])
    assert "changed from ['c'] to ['c']" not in keys.message
    pair = load(CORPUS / "33-source-column-retype-under-aggregate.yaml")
    d = classify(*pair.plans())
    aggs = next(c for c in d.changes if c.field == "aggregates")
    assert (aggs.old, aggs.new) == (["SUM(orders.qty:bigint)"], ["SUM(orders.qty:double)"])


@pytest.mark.parametrize("path", pair_files(), ids=lambda p: p.stem)
def test_corpus_reasons_never_claim_an_unchanged_value(path: Any) -> None:
    pair = load(path)
    d = classify(*pair.plans(), pair.new.upgrade)
    _no_claim_without_difference(d.changes)
    # no step is both removed and added under the same id (a phantom change)
    removed = {c.step for c in d.changes if c.field == "steps" and c.new is None}
    added = {c.step for c in d.changes if c.field == "steps" and c.old is None}
    assert not removed & added, d.reasons


def test_matching_pairs_the_final_projection_after_a_subquery() -> None:
    old = _plan(_spec(f"SELECT o.order_id, o.customer, p.paid FROM orders o {JOIN}"))
    new = _plan(
        _spec(
            f"SELECT o.order_id, o.customer, p.paid FROM (SELECT order_id, customer, ts FROM orders) o {JOIN}"
        )
    )
    m = match(old, new)
    assert {(o.id, n.id) for o, n in m.pairs} >= {
        ("project-1", "project-2"),
        ("join-1", "join-1"),
        ("sink", "sink"),
    }
    assert [s.id for s in m.added] == ["project-1"] and m.removed == []


# -- spec fields outside the plan ----------------------------------------------------------------


def test_resources_only_change_is_transparent() -> None:
    old = _spec(f"SELECT o.order_id, o.customer, p.paid FROM orders o {JOIN}")
    new = {**old, "resources": {"driver": {"limits": {"memory": "2Gi"}}, "executors": 2}}
    plan = _plan(old)
    assert classify(plan, plan).decision == "none"  # plans alone: nothing to see
    d = classify(plan, plan, old_spec=old, new_spec=new)
    assert (d.category, d.decision) == ("transparent", "in-place")
    fields = {c.field: (c.old, c.new) for c in d.changes}
    assert fields == {"resources.driver.limits.memory": (None, "2Gi"), "resources.executors": (None, 2)}
    assert any("spec.resources.driver.limits.memory changed from none to '2Gi'" in r for r in d.reasons)


def test_runtime_fields_old_to_new_and_what_is_ignored() -> None:
    old = {"resources": {"executor": {"requests": {"cpu": "1"}}}, "sink": {"topic": "t", "partitions": 3}}
    new = {
        "resources": {"executor": {"requests": {"cpu": "2"}}},
        "sink": {"topic": "t", "partitions": 6},
        "restartNonce": "x",
        "suspend": True,
        "deletionPolicy": "Delete",
        "upgrade": {"allowReplace": False},
    }
    changes = {c.field: (c.old, c.new, c.category) for c in runtime_changes(old, new)}
    assert changes == {
        "resources.executor.requests.cpu": ("1", "2", "transparent"),
        "sink.partitions": (3, 6, "transparent"),
        "restartNonce": (None, "x", "transparent"),
    }
    # snake_case (model_dump) and camelCase (manifest) give the same settings; empty blocks are nothing
    assert runtime_settings({"restart_nonce": "a", "resources": None}) == {"restartNonce": "a"}
    assert runtime_changes({"resources": {}}, {}) == []
    # the flattened settings are a valid spec too (what an operator could pin next to the plan)
    flat = runtime_settings(new)
    assert runtime_settings(flat) == flat
    assert runtime_changes(flat, new) == []


def test_runtime_change_next_to_a_plan_change_is_listed_and_the_plan_decides() -> None:
    old = _spec("SELECT customer, count(*) AS n FROM orders GROUP BY customer", "update")
    new = {**_spec("SELECT customer, count(*) AS n FROM orders WHERE amount > 1 GROUP BY customer", "update")}
    new["resources"] = {"driver": {"requests": {"cpu": "500m"}}}
    d = classify(_plan(old), _plan(new), old_spec=old, new_spec=new)
    assert (d.category, d.decision) == ("data-selection", "in-place")
    assert any(c.field == "resources.driver.requests.cpu" for c in d.changes)
    old2 = {**old, "resources": {"driver": {"requests": {"cpu": "500m"}}}}
    d = classify(_plan(old2), _plan(old2), old_spec=old2, new_spec=dict(old2))
    assert d.decision == "none"
