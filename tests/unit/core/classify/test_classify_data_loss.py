"""How the upgrade classifier takes the Kafka settings of issue 32: a source's onDataLoss (in the
plan) and the sink topic's cleanup policy (outside it) change how the query runs, never what it
computes: transparent, in place on the same checkpoint."""

from __future__ import annotations

import pytest
from sluice.core.classify import classify
from sluice.core.classify.runtime import runtime_changes
from sluice.core.plan.model import KafkaSourceV1, Plan
from sluice.core.spec import UpgradePolicy

from tests.support.runtime import plan_from_yaml


def _plan(on_data_loss: str | None) -> Plan:
    plan = plan_from_yaml("""\
  sources:
    - name: orders
      topic: orders
      schema: [{name: customer, type: string}]
  sql: "SELECT customer, count(*) AS n FROM orders GROUP BY customer"
  sink: {topic: out, outputMode: update}
""")
    steps = [s.model_copy(update={"on_data_loss": on_data_loss}) if isinstance(s, KafkaSourceV1) else s
             for s in plan.steps]
    return plan.model_copy(update={"steps": steps}).with_hash()


@pytest.mark.parametrize(("old", "new"), [("fail", "skip"), ("skip", "fail"), (None, "fail")])
def test_a_changed_on_data_loss_is_transparent_and_in_place(old: str | None, new: str) -> None:
    decision = classify(_plan(old), _plan(new), UpgradePolicy())
    assert (decision.category, decision.decision) == ("transparent", "in-place"), decision.reasons
    [change] = decision.changes
    assert (change.step, change.field, change.old, change.new) == ("source-orders", "onDataLoss",
                                                                   old or "skip", new)
    assert "onDataLoss changed from" in change.message


def test_a_plan_without_the_field_skips_as_it_ran_so_skip_changes_no_behaviour() -> None:
    decision = classify(_plan(None), _plan("skip"), UpgradePolicy())
    assert (decision.category, decision.decision) == ("transparent", "in-place")
    assert not [c for c in decision.changes if c.field == "onDataLoss"]  # only the hashes differ


def test_a_changed_sink_cleanup_policy_restarts_on_the_same_checkpoint() -> None:
    old = {"sink": {"topic": "out", "outputMode": "update", "key": ["customer"]}}
    new = {"sink": {**old["sink"], "cleanupPolicy": "compact"}}
    [change] = runtime_changes(old, new)
    assert (change.field, change.old, change.new, change.category) == (
        "sink.cleanupPolicy", None, "compact", "transparent")
    assert "when it is created" in change.message
