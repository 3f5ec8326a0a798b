"""Checkpoint backstop: does a checkpoint still fit a plan? (pure comparison, no I/O)

The classifier decides from plans. Before an in-place restart, the runtime can also check the
checkpoint itself (``sluice_runtime.backstop`` reads the files and calls this module):
- the Spark settings pinned in the latest ``offsets/N`` metadata must equal the plan's pinned
  settings (Spark restores them silently and ignores the session's values);
- the stateful operators in ``state/<op>/_metadata/metadata`` must match the plan's stateful steps
  (count and kind);
- the state signature recorded in the checkpoint when it was created (``sluice/state.json``:
  every stateful step's keys, aggregates, windows, join and dedup parameters expanded down to typed
  source columns, see :mod:`sluice.core.classify.lineage`) must equal the new plan's. This is
  stricter than Spark's own check, which compares state schemas by type only. What each stateful
  step type contributes is its descriptor's ``state`` part (:mod:`sluice.core.plan.steptypes`).

A signature records its format's version (:data:`SIGNATURE_VERSION`). Only a signature of this
version is compared: one of another version (a later format, recorded by a newer runtime and read
by an older one after an engine rollback; a missing or malformed version) is *not comparable* and
is treated like a checkpoint that records no signature: the pinned settings and the stateful
operators are still checked, the state's meaning is not (it was decided from the plans by the
classifier, and Spark still checks the state schemas' types). It is never read as a mismatch, which
would refuse every start on the checkpoint, a rollback's included; once a plan has started on it,
the checkpoint records that plan's signature in this version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

from sluice.core.classify.lineage import Lineage
from sluice.core.plan.model import Plan
from sluice.core.plan.steptypes import REGISTRY, STATEFUL

#: the format of :func:`state_signature`, recorded in it: a signature of another version is not
#: compared (see the module's description)
SIGNATURE_VERSION = 2


def state_signature(plan: Plan) -> dict[str, Any]:
    """What the state of every stateful step means, as JSON-able data (version :data:`SIGNATURE_VERSION`)."""
    lin = Lineage(plan)
    steps: dict[str, Any] = {}
    for step in plan.steps:
        if step.type not in STATEFUL:
            continue
        state = REGISTRY[step.type].state
        if state is None:  # tests/unit/core/plan/test_step_types.py requires it of a stateful type
            raise ValueError(f"stateful step type {step.type} has no state signature in its descriptor")
        steps[step.id] = {"type": step.type, **state(step, lin)}
    watermarks = {s.id: [s.column, s.delay] for s in plan.steps if s.type == "watermarkV1"}  # type: ignore[union-attr]
    return {
        "version": SIGNATURE_VERSION,
        "settings": plan.settings.spark_conf(),
        "steps": steps,
        "watermarks": watermarks,
        "planHash": plan.hash,
    }


def comparable(signature: object) -> TypeGuard[dict[str, Any]]:
    """Whether a recorded signature can be compared with a plan's: a JSON object of this version."""
    return isinstance(signature, dict) and signature.get("version") == SIGNATURE_VERSION


@dataclass
class StateOperator:
    operator_id: int
    name: str
    stores: list[str] = field(default_factory=list)


@dataclass
class CheckpointFacts:
    """What a checkpoint says about itself (read by the runtime)."""

    conf: dict[str, str] = field(default_factory=dict)
    operators: list[StateOperator] = field(default_factory=list)
    #: the recorded state signature as read (None: none recorded; compared only if :func:`comparable`)
    signature: dict[str, Any] | None = None


def check(plan: Plan, facts: CheckpointFacts) -> list[str]:
    """Problems that make an in-place restart of ``plan`` on this checkpoint unsafe ([] if none)."""
    problems: list[str] = []
    for key, value in plan.settings.spark_conf().items():
        pinned = facts.conf.get(key)
        if pinned is not None and pinned != value:
            problems.append(
                f"The checkpoint pins {key}={pinned}, but the plan sets {value}; Spark would keep "
                f"{pinned} silently. Replace the query (new checkpoint) to change it."
            )
    stateful = [s for s in plan.steps if s.type in STATEFUL]
    if facts.operators and len(facts.operators) != len(stateful):
        problems.append(
            f"The checkpoint has {len(facts.operators)} stateful operator(s) "
            f"({', '.join(o.name for o in facts.operators)}), the plan has {len(stateful)} "
            f"({', '.join(s.id for s in stateful)})."
        )
    elif facts.operators:
        for op, step in zip(sorted(facts.operators, key=lambda o: o.operator_id), stateful, strict=True):
            names = REGISTRY[step.type].spark_operators if step.type in REGISTRY else frozenset()
            if names and op.name not in names:
                problems.append(
                    f"Stateful operator {op.operator_id} in the checkpoint is {op.name!r}, but "
                    f"step {step.id} of the plan is a {step.type}."
                )
    if comparable(facts.signature):
        # a signature of another version is not comparable: checked as a checkpoint without one
        old = facts.signature
        new = state_signature(plan)
        old_steps, new_steps = old.get("steps", {}), new["steps"]
        for sid in sorted(set(old_steps) | set(new_steps)):
            a, b = old_steps.get(sid), new_steps.get(sid)
            if a == b:
                continue
            if a is None or b is None:
                problems.append(
                    f"Step {sid} is {'new' if a is None else 'gone'}: the checkpoint's state was "
                    f"written for a different set of stateful operators."
                )
                continue
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    problems.append(
                        f"Step {sid}: state {k} in the checkpoint is {a.get(k)!r}, the plan needs "
                        f"{b.get(k)!r}."
                    )
        if old.get("watermarks") != new["watermarks"]:
            ow, nw = old.get("watermarks", {}), new["watermarks"]
            for wid in sorted(set(ow) | set(nw)):
                if (ow.get(wid) or [None])[0] != (nw.get(wid) or [None])[0]:
                    problems.append(
                        f"Step {wid}: watermark column in the checkpoint is "
                        f"{(ow.get(wid) or [None])[0]!r}, the plan uses {(nw.get(wid) or [None])[0]!r}."
                    )
    return problems
