"""Which step of the old plan is which step of the new plan.

Step ids are numbered by the compiler per kind in the order it meets the steps (``filter-1``,
``project-1``, ``project-2``): a subquery added in front of a join shifts them, and comparing steps
by id would then compare the subquery's projection with the final one and report changes that did
not happen.
So steps are matched by their place in the plan:
- the sink with the sink, a source by its source name;
- any other step by its type and its *anchor path*: the stateful operators, unions and the sink
  (each with the input position it feeds) on its way to the sink; a projection, filter or watermark
  also by how many steps of its own type lie between it and the next anchor downstream.
Steps whose place is shared by another step of the same plan fall back to their ids. A step left
over in both plans with the same type and the same (matched) inputs is the same step moved (a
projection over a source that now feeds a ``UNION ALL``); any other step left over is added or
removed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sluice.core.plan.model import Plan
from sluice.core.plan.steptypes import ANCHORS

#: Steps that anchor the places of the steps before them.

Key = tuple[Any, ...]


def _consumers(plan: Plan) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for step in plan.steps:
        for i, sid in enumerate(step.inputs):
            out[sid].append((step.id, i))
    return {k: sorted(v) for k, v in out.items()}


def place(plan: Plan) -> dict[str, Key]:
    """The place of every step of ``plan`` (step id -> key)."""
    by_id = {s.id: s for s in plan.steps}
    consumers = _consumers(plan)
    out: dict[str, Key] = {}
    for step in plan.steps:
        if step.type == "kafkaSinkV1":
            out[step.id] = ("kafkaSinkV1",)
            continue
        if step.type == "kafkaSourceV1":
            out[step.id] = ("kafkaSourceV1", getattr(step, "source", step.id))
            continue
        path: list[tuple[str, int]] = []
        same_type_before_anchor = 0
        seen = {step.id}
        current = step.id
        while consumers.get(current):
            nxt, index = consumers[current][0]
            if nxt in seen or nxt not in by_id:
                break
            seen.add(nxt)
            nxt_type = by_id[nxt].type
            if nxt_type in ANCHORS:
                path.append((nxt_type, index))
            elif not path and nxt_type == step.type:
                same_type_before_anchor += 1
            current = nxt
        if step.type in ANCHORS:
            out[step.id] = (step.type, tuple(path))
        else:
            out[step.id] = (step.type, tuple(path), same_type_before_anchor)
    return out


@dataclass
class Matching:
    pairs: list[tuple[Any, Any]] = field(default_factory=list)  # (old step, new step)
    removed: list[Any] = field(default_factory=list)  # old steps without a counterpart
    added: list[Any] = field(default_factory=list)  # new steps without a counterpart

    def new_id(self, old_id: str) -> str | None:
        return next((n.id for o, n in self.pairs if o.id == old_id), None)


def match(old: Plan, new: Plan) -> Matching:
    """Pair the steps of ``old`` and ``new`` by their place (ids only where places are shared)."""
    op, np_ = place(old), place(new)
    ocount: dict[Key, int] = defaultdict(int)
    ncount: dict[Key, int] = defaultdict(int)
    for k in op.values():
        ocount[k] += 1
    for k in np_.values():
        ncount[k] += 1
    nby_key = {k: sid for sid, k in np_.items() if ncount[k] == 1}
    new_by_id = {s.id: s for s in new.steps}
    result = Matching()
    used: set[str] = set()
    for step in old.steps:
        key = op[step.id]
        other: Any = None
        if ocount[key] == 1 and key in nby_key:
            other = new_by_id[nby_key[key]]
        else:  # a shared place: the step with the same id and the same place, if any
            same_id = new_by_id.get(step.id)
            if same_id is not None and np_.get(same_id.id) == key:
                other = same_id
        if other is not None and other.type == step.type and other.id not in used:
            result.pairs.append((step, other))
            used.add(other.id)
        else:
            result.removed.append(step)
    # second pass: the same step type over the same inputs, moved to another place
    to_new = {o.id: n.id for o, n in result.pairs}
    left_new = [s for s in new.steps if s.id not in used]
    for step in list(result.removed):
        inputs = [to_new.get(i) for i in step.inputs]
        if not inputs or None in inputs:
            continue
        same = [s for s in left_new if s.type == step.type and list(s.inputs) == inputs]
        rivals = [
            o for o in result.removed if o.type == step.type and [to_new.get(i) for i in o.inputs] == inputs
        ]
        if len(same) == 1 and len(rivals) == 1:
            result.pairs.append((step, same[0]))
            result.removed.remove(step)
            left_new.remove(same[0])
            used.add(same[0].id)
            to_new[step.id] = same[0].id
    result.added = [s for s in new.steps if s.id not in used]
    return result
