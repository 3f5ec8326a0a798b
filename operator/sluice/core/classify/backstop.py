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
  stricter than Spark's own check, which compares state schemas by type only. A signature is
  compared with the plan's signature of the same version (version 1: the expansions before
  pass-through projections and aggregate outputs were expanded to what they compute, and before
  join keys were resolved on the join's own sides), so checkpoints recorded earlier stay usable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluice.core.classify.lineage import Lineage
from sluice.core.plan.model import Plan
from sluice.core.plan.steptypes import REGISTRY, STATEFUL

SIGNATURE_VERSION = 2

def _expand_all(lin: Lineage, step: Any, exprs: list[str]) -> list[str]:
    return [lin.expand(e, list(step.inputs)) if e != "*" else "*" for e in exprs]


def state_signature(plan: Plan, version: int = SIGNATURE_VERSION) -> dict[str, Any]:
    """What the state of every stateful step means, as JSON-able data (in signature ``version``)."""
    legacy = version < 2
    lin = Lineage(plan, legacy=legacy)
    steps: dict[str, Any] = {}
    for step in plan.steps:
        if step.type not in STATEFUL:
            continue
        sig: dict[str, Any] = {"type": step.type}
        keys = getattr(step, "keys", None)
        if step.type == "streamStreamJoinV1":
            sig["joinType"] = step.join_type  # type: ignore[union-attr]
            over = list(step.inputs) if legacy else [step.id]  # v2: qualified columns on the join's sides
            sig["keys"] = [
                [lin.expand(k.left, over), lin.expand(k.right, over)]
                for k in step.keys  # type: ignore[union-attr]
            ]
            tc = step.time_condition  # type: ignore[union-attr]
            sig["timeCondition"] = lin.expand(tc, over) if tc else None
            sig["inputs"] = [
                [f"{f.name} {f.type}" for f in lin.by_id[i].schema_] for i in step.inputs if i in lin.by_id
            ]
        elif step.type == "deduplicateV1":
            sig["columns"] = [lin.column(c, None, list(step.inputs), 0) for c in step.columns]  # type: ignore[union-attr]
        else:
            sig["keys"] = _expand_all(lin, step, [k.expr for k in keys or []])
            sig["aggregates"] = [[a.function, _expand_all(lin, step, a.args)] for a in step.aggregates]  # type: ignore[union-attr]
            if step.type == "windowAggregateV1":
                w = step.window  # type: ignore[union-attr]
                sig["window"] = [lin.expand(w.column, list(step.inputs)), w.size, w.slide]
            if step.type == "sessionWindowAggregateV1":
                s = step.session  # type: ignore[union-attr]
                sig["session"] = [lin.expand(s.column, list(step.inputs)), s.gap]
            sig["types"] = [f.type for f in step.schema_]
        steps[step.id] = sig
    watermarks = {s.id: [s.column, s.delay] for s in plan.steps if s.type == "watermarkV1"}  # type: ignore[union-attr]
    return {
        "version": version,
        "settings": plan.settings.spark_conf(),
        "steps": steps,
        "watermarks": watermarks,
        "planHash": plan.hash,
    }


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
    if facts.signature is not None:
        old = facts.signature
        new = state_signature(plan, int(old.get("version") or 1))
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
