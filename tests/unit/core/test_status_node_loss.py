"""The ``NodeLossTolerant`` condition: kept as it is when nothing changes, its time kept while its status
stays."""

from __future__ import annotations

from sluice.core.status import Facts, get_condition, reduce_status, with_node_loss_condition

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def test_the_condition_says_whether_a_node_loss_leaves_a_driver() -> None:
    status = reduce_status(None, Facts(generation=3), T0)
    out = with_node_loss_condition(status, False, "all on one node", T0)
    cond = get_condition(out["conditions"], "NodeLossTolerant")
    assert cond == {
        "type": "NodeLossTolerant",
        "status": "False",
        "reason": "DriversOnOneNode",
        "message": "all on one node",
        "lastTransitionTime": T0,
        "observedGeneration": 3,
    }
    assert [c["type"] for c in out["conditions"]] == ["Ready", "Progressing", "Degraded", "NodeLossTolerant"]
    assert with_node_loss_condition(out, False, "all on one node", T1) is out  # nothing to write
    changed = with_node_loss_condition(out, False, "still on one node", T1)
    assert get_condition(changed["conditions"], "NodeLossTolerant")["lastTransitionTime"] == T0
    spread = get_condition(
        with_node_loss_condition(out, True, "spread", T1)["conditions"], "NodeLossTolerant"
    )
    assert spread is not None and (spread["status"], spread["reason"], spread["lastTransitionTime"]) == (
        "True",
        "DriversSpread",
        T1,
    )
    # the other conditions' reducer keeps it
    again = reduce_status(changed, Facts(generation=4), T1)
    assert get_condition(again["conditions"], "NodeLossTolerant") is not None
