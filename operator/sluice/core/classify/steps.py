"""Comparison of one step of the old plan with the step of the same id in the new plan.

Every field of every step type is either compared by a rule (``stateful``, ``stateless``) or is
structural (id, inputs, schema, type: judged through lineage, the order of stateful operators and
the plan's output schema); a field that differs and has no rule is reported as a topology change
(conservative: an unknown difference must never be applied in place).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.core.classify.comparison import REPLACE, STRUCTURAL, TRANSPARENT, Ctx, fmt
from sluice.core.classify.stateful import _aggregate, _dedup, _join, _session, _state_types, _window
from sluice.core.classify.stateless import _filter, _project, _sink, _source, _union, _watermark
from sluice.core.plan.steptypes import STATEFUL

__all__ = ["KNOWN_STEP_TYPES", "REPLACE", "RULES", "TRANSPARENT", "Ctx", "compare_step", "fmt"]


def _dump(step: Any) -> dict[str, Any]:
    data: dict[str, Any] = step.model_dump(mode="json")
    return data


def compare_step(ctx: Ctx, old: Any, new: Any) -> None:
    """Append the changes between two steps with the same id and type."""
    handler = RULES.get(new.type)
    handled: set[str] = set()
    if handler is not None:
        handled = handler(ctx, old, new)
    if new.type in STATEFUL:
        handled |= _state_types(ctx, old, new)
    od, nd = _dump(old), _dump(new)
    for key in sorted(set(od) | set(nd)):
        if key in handled or key in STRUCTURAL:
            continue
        if od.get(key) != nd.get(key):
            ctx.add(
                "topology",
                new.id,
                key,
                od.get(key),
                nd.get(key),
                f"Step {new.id}: field '{key}' changed from {fmt(od.get(key))} to {fmt(nd.get(key))}; "
                f"Sluice has no rule proving this keeps state and results, so it treats it as a "
                f"topology change. {REPLACE}",
            )


#: the classifier's rule of each step type (the rest of what a step type is:
#: ``sluice.core.plan.steptypes``): the fields it compares, and what their changes mean
RULES: dict[str, Callable[[Ctx, Any, Any], set[str]]] = {
    "aggregateV1": _aggregate,
    "windowAggregateV1": _window,
    "sessionWindowAggregateV1": _session,
    "streamStreamJoinV1": _join,
    "deduplicateV1": _dedup,
    "watermarkV1": _watermark,
    "filterV1": _filter,
    "projectV1": _project,
    "unionV1": _union,
    "kafkaSourceV1": _source,
    "kafkaSinkV1": _sink,
}

KNOWN_STEP_TYPES = frozenset(RULES)
