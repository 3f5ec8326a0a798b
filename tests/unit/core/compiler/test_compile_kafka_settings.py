"""The Kafka settings of a query's spec (issue 32): a source's onDataLoss (pinned in its plan step),
and the sink topic's cleanup policy (checked against the output, never part of the plan)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice.core.compiler import CompileError
from sluice.core.plan.model import KafkaSourceV1, Plan

from tests.support.runtime import plan_from_yaml

REPO = Path(__file__).resolve().parents[4]


def _spec(*, on_data_loss: str = "", sink: str = "", mode: str = "update") -> str:
    source_extra = f"      onDataLoss: {on_data_loss}\n" if on_data_loss else ""
    return f"""\
  sources:
    - name: orders
      topic: orders
{source_extra}      schema: [{{name: customer, type: string}}, {{name: amount, type: double}}]
  sql: "SELECT customer, count(*) AS n FROM orders GROUP BY customer"
  sink: {{topic: out, outputMode: {mode}{sink}}}
"""


def _source(plan: Plan) -> KafkaSourceV1:
    return next(s for s in plan.steps if isinstance(s, KafkaSourceV1))


def test_a_source_fails_on_data_loss_unless_it_says_skip() -> None:
    assert _source(plan_from_yaml(_spec())).on_data_loss == "fail"
    assert _source(plan_from_yaml(_spec(on_data_loss="fail"))).on_data_loss == "fail"
    skip = plan_from_yaml(_spec(on_data_loss="skip"))
    assert _source(skip).on_data_loss == "skip"
    assert '"onDataLoss":"skip"' in skip.canonical_json()
    assert skip.hash != plan_from_yaml(_spec()).hash


def test_an_unknown_on_data_loss_is_refused() -> None:
    with pytest.raises(Exception, match="onDataLoss"):
        plan_from_yaml(_spec(on_data_loss="ignore"))


def test_a_plan_compiled_before_the_field_keeps_its_hash_and_reads_as_skip() -> None:
    for path in sorted((REPO / "tests" / "corpus" / "historical_plans").glob("*.json")):
        plan = Plan.from_json(path.read_text())
        for step in plan.steps:
            if isinstance(step, KafkaSourceV1):
                assert step.on_data_loss is None
        assert plan.compute_hash() == plan.hash, path.name


@pytest.mark.parametrize("policy", ["compact", "delete"])
def test_the_cleanup_policy_is_not_part_of_the_plan(policy: str) -> None:
    base = plan_from_yaml(_spec(sink=", key: [customer]"))
    assert plan_from_yaml(_spec(sink=f", key: [customer], cleanupPolicy: {policy}")).hash == base.hash


@pytest.mark.parametrize(("mode", "sink", "words"), [
    ("update", ", cleanupPolicy: compact", "needs a key"),
    ("complete", ", key: [customer], cleanupPolicy: compact", "needs outputMode update"),
])
def test_a_compacted_sink_topic_needs_a_keyed_update_output(mode: str, sink: str, words: str) -> None:
    with pytest.raises(CompileError) as caught:
        plan_from_yaml(_spec(sink=sink, mode=mode))
    [problem] = caught.value.problems
    assert problem.field == "spec.sink.cleanupPolicy"
    assert words in problem.message


def test_an_append_output_without_key_is_refused_compaction_twice() -> None:
    spec = _spec(sink=", cleanupPolicy: compact", mode="append").replace(
        "SELECT customer, count(*) AS n FROM orders GROUP BY customer", "SELECT customer FROM orders")
    with pytest.raises(CompileError) as caught:
        plan_from_yaml(spec)
    assert [p.field for p in caught.value.problems] == ["spec.sink.cleanupPolicy"] * 2
