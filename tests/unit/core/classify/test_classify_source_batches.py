"""How the upgrade classifier takes a source's batch sizing (issue 31): maxOffsetsPerTrigger decides how
many records a batch reads and minPartitions how many tasks read them, never what the query computes:
transparent, in place on the same checkpoint. minPartitions's reason names the task writers' replay
check (LayoutChanged)."""

from __future__ import annotations

import pytest
from sluice.core.classify import classify
from sluice.core.plan.model import KafkaSourceV1, Plan
from sluice.core.spec import UpgradePolicy

from tests.support.runtime import plan_from_yaml


def _plan(sql: str, **fields: int | None) -> Plan:
    plan = plan_from_yaml(f"""\
  sources:
    - name: orders
      topic: orders
      schema: [{{name: customer, type: string}}, {{name: amount, type: double}}]
  sql: "{sql}"
  sink: {{topic: out, outputMode: update}}
""")
    steps = [s.model_copy(update=fields) if isinstance(s, KafkaSourceV1) else s for s in plan.steps]
    return plan.model_copy(update={"steps": steps}).with_hash()


STATELESS = "SELECT customer, amount FROM orders"
STATEFUL = "SELECT customer, count(*) AS n FROM orders GROUP BY customer"


@pytest.mark.parametrize("sql", [STATELESS, STATEFUL])
@pytest.mark.parametrize(("old", "new"), [(None, 1000), (1_000_000, 1000), (1000, None)])
def test_a_changed_rate_limit_is_transparent_and_in_place(sql: str, old: int | None,
                                                          new: int | None) -> None:
    decision = classify(_plan(sql, max_offsets_per_trigger=old), _plan(sql, max_offsets_per_trigger=new),
                        UpgradePolicy())
    assert (decision.category, decision.decision) == ("transparent", "in-place"), decision.reasons
    [change] = decision.changes
    assert (change.step, change.field, change.old, change.new) == ("source-orders", "maxOffsetsPerTrigger",
                                                                   old, new)


@pytest.mark.parametrize("sql", [STATELESS, STATEFUL])
@pytest.mark.parametrize(("old", "new"), [(None, 8), (8, 16), (16, None)])
def test_a_changed_min_partitions_is_transparent_and_in_place(sql: str, old: int | None,
                                                              new: int | None) -> None:
    decision = classify(_plan(sql, min_partitions=old), _plan(sql, min_partitions=new), UpgradePolicy())
    assert (decision.category, decision.decision) == ("transparent", "in-place"), decision.reasons
    [change] = decision.changes
    assert (change.step, change.field, change.old, change.new) == ("source-orders", "minPartitions", old, new)
    assert "minPartitions changed from" in change.message
    assert "SLUICE_EOS_WRITERS=tasks" in change.message
    assert "LayoutChanged" in change.message


def test_the_same_sizing_is_no_change() -> None:
    old = _plan(STATELESS, max_offsets_per_trigger=10, min_partitions=4)
    decision = classify(old, _plan(STATELESS, max_offsets_per_trigger=10, min_partitions=4), UpgradePolicy())
    assert decision.category == "none"
    assert not decision.changes
