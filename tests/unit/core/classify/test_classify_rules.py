"""Classifier rules on hand-built plans (no compiler involved)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.core.classify import SEVERITY, classify
from sluice.core.classify.model import DECISION_FOR
from sluice.core.plan.model import Plan
from sluice.core.spec import UpgradePolicy

from tests.support.classify_plans import ORDERS, agg_plan, join_plan, plan, sink, source, stateless_plan


def test_same_plan_is_none() -> None:
    d = classify(agg_plan(), agg_plan(), UpgradePolicy())
    assert (d.category, d.decision, d.changes) == ("none", "none", [])


@pytest.mark.parametrize(
    ("old", "new", "category", "decision", "field"),
    [
        (
            stateless_plan(),
            stateless_plan(trigger={"processingTime": "1 minute"}),
            "transparent",
            "in-place",
            "trigger.processingTime",
        ),
        (stateless_plan(), stateless_plan(where="amount > 11"), "data-selection", "in-place", "condition"),
        (
            agg_plan(where="amount > 1"),
            agg_plan(where="amount > 5"),
            "data-selection",
            "in-place",
            "condition",
        ),
        (agg_plan(having="v > 1"), agg_plan(having="v > 2"), "data-selection", "in-place", "condition"),
        (agg_plan(), agg_plan(group="region"), "topology", "replace", "keys"),
        (agg_plan(), agg_plan(fn="sum", arg="amount"), "topology", "replace", "aggregates"),
        (agg_plan(mode="update"), agg_plan(mode="complete"), "topology", "replace", "outputMode"),
        (stateless_plan(), stateless_plan(outputMode="update"), "transparent", "in-place", "outputMode"),
        (join_plan(), join_plan("leftOuter"), "topology", "replace", "joinType"),
        (
            join_plan(),
            join_plan(left_key="o.order_id", right_key="p.order_id"),
            "topology",
            "replace",
            "keys",
        ),
        (stateless_plan(), stateless_plan(topic="other"), "data-selection", "in-place", "topic"),
        (agg_plan(), agg_plan(key=["customer"]), "schema-evolution", "in-place", "key"),
    ],
)
def test_rules(old: Plan, new: Plan, category: str, decision: str, field: str | None) -> None:
    d = classify(old, new, UpgradePolicy())
    assert (d.category, d.decision) == (category, decision), d.reasons
    if field is not None:
        assert any(c.field == field and c.category == category for c in d.changes), d.changes


def test_policy_forbidding_replace_rejects() -> None:
    d = classify(agg_plan(), agg_plan(group="region"), UpgradePolicy(allow_replace=False))
    assert (d.category, d.decision) == ("topology", "reject")
    assert "spec.upgrade.allowReplace" in d.reasons[0]
    # in-place changes are not affected by the policy
    d = classify(agg_plan(where="a > 1"), agg_plan(where="a > 2"), UpgradePolicy(allow_replace=False))
    assert d.decision == "in-place"


def test_settings_change_is_topology() -> None:
    old = agg_plan()
    new = Plan.from_dict({**old.model_dump(by_alias=True), "settings": {"shufflePartitions": 16}}).with_hash()
    d = classify(old, new)
    assert (d.category, d.decision) == ("topology", "replace")
    change = next(c for c in d.changes if c.step == "settings")
    assert (change.field, change.old, change.new) == ("shuffle_partitions", 8, 16)
    assert (
        "spark.sql.shuffle.partitions" in change.message and "8" in change.message and "16" in change.message
    )


def test_version_downgrade_is_unsupported() -> None:
    old = agg_plan().model_copy(update={"version": 2})
    d = classify(old, agg_plan())
    assert (d.category, d.decision) == ("unsupported", "reject")
    assert "version" in d.reasons[1] and "2" in d.reasons[1] and "1" in d.reasons[1]


def test_unknown_step_type_is_unsupported() -> None:
    new = agg_plan()
    weird = new.steps[1].model_copy(update={"type": "aggregateV9"})
    new = new.model_copy(update={"steps": [new.steps[0], weird, *new.steps[2:]]})
    d = classify(agg_plan(), new)
    assert (d.category, d.decision) == ("unsupported", "reject")
    assert any("aggregateV9" in r for r in d.reasons)


def test_upstream_projection_feeding_group_key_is_topology() -> None:
    def p(expr: str) -> Plan:
        proj = [{"name": "k", "type": "string"}, {"name": "amount", "type": "double"}]
        out = [{"name": "k", "type": "string"}, {"name": "n", "type": "bigint"}]
        return plan(
            [
                source(),
                {
                    "type": "projectV1",
                    "id": "project-1",
                    "inputs": ["source-orders"],
                    "schema": proj,
                    "expressions": [{"name": "k", "expr": expr}, {"name": "amount", "expr": "amount"}],
                },
                {
                    "type": "aggregateV1",
                    "id": "aggregate-1",
                    "inputs": ["project-1"],
                    "schema": out,
                    "keys": [{"name": "k", "expr": "k"}],
                    "aggregates": [{"name": "n", "function": "count", "args": ["*"], "expr": "count(*)"}],
                },
                sink("aggregate-1", out, outputMode="update"),
            ]
        )

    d = classify(p("upper(customer)"), p("lower(customer)"))
    assert d.category == "topology"
    assert any(c.step == "aggregate-1" and c.field == "keys" for c in d.changes)
    # a rename on the way does not change the state's meaning
    d = classify(p("customer"), p("customer"))
    assert d.category == "none"


def test_source_type_change_under_aggregate_is_topology() -> None:
    cols = [dict(c) for c in ORDERS]
    old = agg_plan(fn="sum", arg="amount")
    new_cols = [c if c["name"] != "amount" else {"name": "amount", "type": "int"} for c in cols]
    steps = [s.model_dump(by_alias=True) for s in old.steps]
    steps[0] = source(columns=new_cols)
    new = plan(steps)
    d = classify(old, new)
    assert d.category == "topology"
    assert any(c.step == "aggregate-1" and c.field == "aggregates" for c in d.changes)
    assert any(c.step == "source-orders" and c.field == "columns.amount" for c in d.changes)


def test_join_input_columns_are_state() -> None:
    old = join_plan()
    steps = [s.model_dump(by_alias=True) for s in old.steps]
    extra = {"name": "note", "type": "string"}
    steps[0] = source(columns=[*ORDERS, extra])
    steps[2]["schema"] = [*ORDERS, extra]
    d = classify(old, plan(steps))
    assert d.category == "topology"
    assert any(c.step == "join-1" and c.field == "leftInput" for c in d.changes)


def test_most_severe_wins_and_all_changes_listed() -> None:
    old = agg_plan(where="amount > 1", trigger={"processingTime": "5 seconds"})
    new = agg_plan(group="region", where="amount > 2", trigger={"processingTime": "9 seconds"})
    d = classify(old, new)
    assert d.category == "topology"
    cats = {c.category for c in d.changes}
    assert {"topology", "data-selection", "transparent"} <= cats
    # reasons are ordered most severe first
    idx = [SEVERITY.index(c.category) for c in d.changes]
    assert len(d.reasons) >= len(d.changes)
    assert sorted(idx, reverse=True)[0] == SEVERITY.index("topology")


def test_severity_order_and_decisions() -> None:
    assert SEVERITY == (
        "none",
        "transparent",
        "data-selection",
        "schema-evolution",
        "topology",
        "source-modifying",
        "unsupported",
    )
    assert [DECISION_FOR[c] for c in SEVERITY] == [
        "none",
        "in-place",
        "in-place",
        "in-place",
        "replace",
        "replace",
        "reject",
    ]


def test_every_change_names_step_field_old_and_new() -> None:
    cases = [
        (agg_plan(), agg_plan(group="region")),
        (join_plan(), join_plan("leftOuter")),
        (stateless_plan(), stateless_plan(where="x > 1", topic="t2")),
    ]
    for old, new in cases:
        for c in classify(old, new).changes:
            assert c.step and c.step in c.message, c
            assert str(c.step)
            for v in (c.old, c.new):
                if isinstance(v, str):
                    assert v in c.message, (v, c.message)


def test_json_shape() -> None:
    d = classify(agg_plan(), agg_plan(fn="sum", arg="amount"))
    data = json.loads(json.dumps(d.to_json_dict()))
    assert set(data) == {"category", "decision", "reasons", "changes"}
    assert set(data["changes"][0]) == {"category", "step", "field", "old", "new", "message"}


_MUTATIONS = {
    "trigger": ({"trigger": {"processingTime": "7 seconds"}}, "transparent"),
    "where": ({"where": "amount > 3"}, "data-selection"),
    "having": ({"having": "v > 3"}, "data-selection"),
    "group": ({"group": "region"}, "topology"),
    "function": ({"fn": "max", "arg": "amount"}, "topology"),
    "mode": ({"mode": "complete"}, "topology"),
}


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(sorted(_MUTATIONS)), min_size=1))
def test_combined_changes_most_severe_wins(names: set[str]) -> None:
    base = {"where": "amount > 1", "having": "v > 1"}
    kwargs: dict[str, object] = dict(base)
    for n in names:
        kwargs.update(_MUTATIONS[n][0])
    d = classify(agg_plan(**base), agg_plan(**kwargs))  # type: ignore[arg-type]
    expected = max((_MUTATIONS[n][1] for n in names), key=SEVERITY.index)
    assert d.category == expected, d.reasons
    assert d.decision == DECISION_FOR[expected]
    # every mutation shows up as at least one change
    assert len(d.changes) >= len(names)


def test_output_mode_update_to_append_only_in_place_for_windowed_aggregations() -> None:
    from tests.support.upgrade_corpus import CORPUS, load

    old, new = load(CORPUS / "31-output-mode.yaml").plans()  # windowed count, update -> append
    d = classify(old, new, UpgradePolicy())
    assert (d.category, d.decision) == ("data-selection", "in-place"), d.reasons
    assert any(c.field == "outputMode" and (c.old, c.new) == ("update", "append") for c in d.changes)
    # append -> update loses the windows waiting in the state for the watermark (pair 37)
    d = classify(new, old, UpgradePolicy())
    assert (d.category, d.decision) == ("topology", "replace"), d.reasons
    # a plain (unwindowed) aggregation stays topology in both directions
    for a, b in (("update", "append"), ("append", "update")):
        d = classify(agg_plan(mode=a), agg_plan(mode=b), UpgradePolicy())
        assert (d.category, d.decision) == ("topology", "replace"), d.reasons
