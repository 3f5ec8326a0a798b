"""Rolling a QueryCluster change across its queries in waves (pure).

A change of a QueryCluster that reaches its queries' pods or plans gives the cluster a new
**target engine** (its digest). Each query keeps running on the engine pinned in its status until
the cluster admits it to the target; once admitted, its reconcile carries the change out like any
upgrade (classified, behind its health gate, rolled back on failure). :func:`plan_wave` decides,
from every query's status, which queries are admitted now:

* a query is **updated** once its pinned engine is the target, **in progress** while a rollout to
  the target runs, **failed** when its rollout to the target was rolled back or failed, **refused**
  when the classifier refused it (a Spark downgrade, a pinned setting that needs a replace that
  the policy forbids): it stays on its engine, the others go on;
* at most ``max_concurrent`` queries are in progress at a time; queries are admitted in name order
  (the first is the canary);
* a failure **halts** the rollout: no query is admitted any more until the cluster changes again
  (a new target), and the cluster's status and events say which query failed and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

QueryState = Literal["updated", "inProgress", "failed", "refused", "pending"]
WaveState = Literal["Progressing", "Halted", "Complete"]

#: lastUpgrade outcomes that halt a rollout, and those that let it go on without the query
HALTING = frozenset({"RolledBack", "Failed"})
REFUSED = frozenset({"Rejected"})


@dataclass(frozen=True)
class QueryFleetState:
    """What the wave planner reads of one query's status."""

    name: str
    engine: str | None  # the digest pinned in status.engine (None: not deployed yet)
    rollout_engine: str | None = None  # the target engine of the rollout in flight, if any
    rollout_waiting: bool = False  # that rollout waits (AwaitingUpgrade / Rejected), nothing runs
    last_engine: str | None = None  # lastUpgrade.toEngine
    last_outcome: str | None = None  # lastUpgrade.outcome
    last_message: str = ""

    def state(self, target: str) -> QueryState:
        if self.engine == target or self.engine is None:
            return "updated"  # a query created on the target never needs a rollout
        if self.rollout_engine == target:
            return "refused" if self.rollout_waiting else "inProgress"
        if self.last_engine == target and self.last_outcome in HALTING:
            return "failed"
        if self.last_engine == target and self.last_outcome in REFUSED:
            return "refused"
        return "pending"


@dataclass(frozen=True)
class Wave:
    target: str
    state: WaveState
    admitted: list[str]
    updated: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def total(self) -> int:
        return len(self.updated) + len(self.in_progress) + len(self.pending) + len(self.refused) + len(
            self.failed)


def plan_wave(target: str, queries: list[QueryFleetState], max_concurrent: int,
              failure: tuple[str, str] | None = None) -> Wave:
    """Which queries may roll to ``target`` now. ``failure``: (query, why) of a failure recorded
    earlier for this target (the halt sticks even once that query's status moves on)."""
    by_state: dict[QueryState, list[str]] = {s: [] for s in ("updated", "inProgress", "failed", "refused",
                                                               "pending")}
    messages: dict[str, str] = {}
    for query in sorted(queries, key=lambda q: q.name):
        state = query.state(target)
        by_state[state].append(query.name)
        messages[query.name] = query.last_message
    failed = list(by_state["failed"])
    if failure is not None and failure[0] not in failed:
        failed.insert(0, failure[0])
        messages.setdefault(failure[0], failure[1])
    common = {"updated": by_state["updated"], "in_progress": by_state["inProgress"],
              "pending": by_state["pending"], "refused": by_state["refused"], "failed": failed}
    done = len(by_state["updated"])
    total = sum(len(v) for v in by_state.values())
    if failed:
        first = failed[0]
        why = (failure[1] if failure is not None and failure[0] == first else messages.get(first)) or "failed"
        return Wave(target, "Halted", by_state["inProgress"], **common,
                    message=f"halted: {first} failed its upgrade ({why}); {done} of {total} queries are "
                    f"on the cluster's engine, {len(by_state['pending'])} not started. Change the "
                    f"QueryCluster again (fix or revert it) to go on")
    if not by_state["pending"] and not by_state["inProgress"]:
        refused = len(by_state["refused"])
        skipped = f"; {refused} refused it and stay on their engine" if refused else ""
        return Wave(target, "Complete", [], **common,
                    message=f"{done} of {total} queries are on the cluster's engine{skipped}")
    room = max(0, max_concurrent - len(by_state["inProgress"]))
    admitted = by_state["inProgress"] + by_state["pending"][:room]
    return Wave(target, "Progressing", admitted, **common,
                message=f"{done} of {total} queries on the cluster's engine, {len(by_state['inProgress'])} "
                f"in progress, {len(by_state['pending'])} waiting (at most {max_concurrent} at a time)")
