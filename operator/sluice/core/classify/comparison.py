"""Shared pieces of the step comparisons: the context, value rendering, common sentences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluice.core.classify.lineage import Lineage
from sluice.core.classify.model import Category, Change, change

UPSTREAM = "are the same text, but the columns they read are computed differently upstream or changed type"
REPLACE = (
    "The state in the checkpoint was built for the old value, so the query needs a new checkpoint (replace)."
)
IN_PLACE_ROWS = (
    "Only records processed after the upgrade are affected; "
    "on its own this keeps state and offsets (in-place)."
)
TRANSPARENT = "Results do not change; applied in place."

#: Fields that are not compared directly, and why.
#: - id: steps are matched by id. - inputs: wiring is judged by lineage and the order of stateful
#:   operators. - schema_: intermediate schemas are judged through lineage (stateful steps), the
#:   join's stored rows, and the plan's output schema. - type: matched before comparing.
STRUCTURAL = {"id", "inputs", "schema_", "type"}


def fmt(value: Any) -> str:
    """Render a value for a sentence: strings quoted, lists bracketed, None as 'none'."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in value.items()) + "}"
    return str(value)


def plain(expanded: str) -> str:
    """A typed expansion without quotes, for a sentence (``SUM(orders.qty:bigint)``)."""
    return expanded.replace("`", "")


@dataclass
class Ctx:
    old: Lineage
    new: Lineage
    stateful: bool  # either plan has a stateful operator
    sink_topic: str
    changes: list[Change] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.old_display = Lineage(self.old.plan, display=True)
        self.new_display = Lineage(self.new.plan, display=True)

    def upstream(
        self, old_over: list[str], new_over: list[str], old_exprs: list[str], new_exprs: list[str]
    ) -> tuple[list[str], list[str]]:
        """How expressions with the same text read differently: their expansions, old and new.

        Without types where that shows the difference (``orders.customer`` -> ``orders.seller``),
        with types where only a type changed (``SUM(orders.qty:bigint)`` -> ``SUM(orders.qty:double)``).
        ``old_over``/``new_over``: the step ids the expressions are evaluated over.
        """
        od = [self.old_display.expand(e, old_over) if e != "*" else e for e in old_exprs]
        nd = [self.new_display.expand(e, new_over) if e != "*" else e for e in new_exprs]
        if od == nd:
            od = [plain(self.old.expand(e, old_over)) if e != "*" else e for e in old_exprs]
            nd = [plain(self.new.expand(e, new_over)) if e != "*" else e for e in new_exprs]
        return od, nd

    def add(self, category: Category, step: str | None, fld: str, old: Any, new: Any, message: str) -> None:
        self.changes.append(change(category, step, fld, old, new, message))
