"""A source's isolation level (in the plan): the compiler's plans read committed; a plan compiled
before the field read uncommitted, so an upgrade from one selects other rows where aborted
transactions were read (data-selection, in place on the same checkpoint)."""

from __future__ import annotations

import pytest
from sluice.core.classify import classify
from sluice.core.plan.model import KafkaSourceV1, Plan
from sluice.core.spec import UpgradePolicy

from tests.support.runtime import plan_from_yaml


def _plan(isolation: str | None) -> Plan:
    plan = plan_from_yaml("""\
  sources:
    - name: orders
      topic: orders
      schema: [{name: customer, type: string}]
  sql: "SELECT customer FROM orders"
  sink: {topic: out}
""")
    steps = [s.model_copy(update={"isolation_level": isolation}) if isinstance(s, KafkaSourceV1) else s
             for s in plan.steps]
    return plan.model_copy(update={"steps": steps}).with_hash()


def test_the_compiler_reads_committed() -> None:
    [source] = [s for s in _plan("read_committed").steps if isinstance(s, KafkaSourceV1)]
    compiled = plan_from_yaml("""\
  sources: [{name: orders, topic: orders, schema: [{name: customer, type: string}]}]
  sql: "SELECT customer FROM orders"
  sink: {topic: out}
""")
    assert [s.isolation_level for s in compiled.steps if isinstance(s, KafkaSourceV1)] == ["read_committed"]
    assert source.isolation_level == "read_committed"


@pytest.mark.parametrize(("old", "new"), [(None, "read_committed"), ("read_uncommitted", "read_committed")])
def test_reading_committed_from_now_on_is_a_data_selection_change_in_place(old: str | None, new: str) -> None:
    decision = classify(_plan(old), _plan(new), UpgradePolicy())
    assert (decision.category, decision.decision) == ("data-selection", "in-place"), decision.reasons
    [change] = decision.changes
    assert (change.field, change.old, change.new) == ("isolationLevel", "read_uncommitted", new)
    assert "aborted transactions" in change.message


def test_a_plan_without_the_field_reads_uncommitted_as_it_ran() -> None:
    decision = classify(_plan(None), _plan("read_uncommitted"), UpgradePolicy())
    assert not [c for c in decision.changes if c.field == "isolationLevel"]
