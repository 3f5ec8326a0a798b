"""A source's batch sizing (issue 31): maxOffsetsPerTrigger and minPartitions in the spec, validated
naming the field, pinned in the source's plan step; a source without maxOffsetsPerTrigger gets the
compiler's default pinned, so a catch-up never reads an unbounded backlog in one batch; plans compiled
before (without the fields) keep their hashes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice.core.plan.model import KafkaSourceV1, Plan
from sluice.core.spec import DEFAULT_MAX_OFFSETS_PER_TRIGGER

from tests.support.runtime import plan_from_yaml

REPO = Path(__file__).resolve().parents[4]


def _spec(extra: str = "") -> str:
    source_extra = "".join(f"      {line}\n" for line in extra.splitlines())
    return f"""\
  sources:
    - name: orders
      topic: orders
{source_extra}      schema: [{{name: customer, type: string}}, {{name: amount, type: double}}]
  sql: "SELECT customer, amount FROM orders WHERE amount > 0"
  sink: {{topic: out}}
"""


def _source(plan: Plan) -> KafkaSourceV1:
    return next(s for s in plan.steps if isinstance(s, KafkaSourceV1))


def test_both_fields_are_pinned_in_the_source_step() -> None:
    plan = plan_from_yaml(_spec("maxOffsetsPerTrigger: 500\nminPartitions: 8"))
    step = _source(plan)
    assert (step.max_offsets_per_trigger, step.min_partitions) == (500, 8)
    assert '"maxOffsetsPerTrigger":500' in plan.canonical_json()
    assert '"minPartitions":8' in plan.canonical_json()


def test_a_source_without_a_rate_limit_gets_the_default_pinned() -> None:
    plan = plan_from_yaml(_spec())
    assert DEFAULT_MAX_OFFSETS_PER_TRIGGER == 1_000_000
    assert _source(plan).max_offsets_per_trigger == DEFAULT_MAX_OFFSETS_PER_TRIGGER
    assert f'"maxOffsetsPerTrigger":{DEFAULT_MAX_OFFSETS_PER_TRIGGER}' in plan.canonical_json()
    # the default is the same plan as the value written out: stating it changes nothing
    assert plan.hash == plan_from_yaml(_spec(f"maxOffsetsPerTrigger: {DEFAULT_MAX_OFFSETS_PER_TRIGGER}")).hash


def test_min_partitions_is_left_out_of_the_plan_when_absent() -> None:
    plan = plan_from_yaml(_spec())
    assert _source(plan).min_partitions is None
    assert "minPartitions" not in plan.canonical_json()
    assert plan.hash != plan_from_yaml(_spec("minPartitions: 4")).hash


@pytest.mark.parametrize(("extra", "field"), [
    ("maxOffsetsPerTrigger: 0", "maxOffsetsPerTrigger"),
    ("maxOffsetsPerTrigger: -5", "maxOffsetsPerTrigger"),
    ("maxOffsetsPerTrigger: many", "maxOffsetsPerTrigger"),
    ("minPartitions: 0", "minPartitions"),
    ("minPartitions: 2.5", "minPartitions"),
])
def test_an_invalid_value_is_refused_naming_the_field(extra: str, field: str) -> None:
    with pytest.raises(Exception, match=field) as info:
        plan_from_yaml(_spec(extra))
    assert "sources" in str(info.value)


def test_plans_compiled_before_the_fields_keep_their_hashes() -> None:
    paths = sorted((REPO / "tests" / "corpus" / "historical_plans").glob("*.json"))
    assert paths
    for path in paths:
        plan = Plan.from_json(path.read_text())
        for step in plan.steps:
            if isinstance(step, KafkaSourceV1):
                assert step.min_partitions is None
                assert "minPartitions" not in plan.canonical_json()
        assert plan.compute_hash() == plan.hash, path.name
