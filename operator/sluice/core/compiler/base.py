"""What the planning modules share: the plan being built, stateful operators, and the planner's face.

``planner.Planner`` drives the planning and calls into ``aggregate`` (one SELECT) and ``joins`` (one
join); those call back through the ``Planning`` protocol below, so no planning module imports the
planner and the modules form no import cycle.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from sqlglot import exp

from sluice.core.compiler.exprs import Compiled, ExprCompiler
from sluice.core.compiler.scope import Field, Relation
from sluice.core.compiler.sqltext import SqlText
from sluice.core.plan.model import FieldSpec, Step


def field_specs(fields: list[Field]) -> list[FieldSpec]:
    return [FieldSpec(name=f.name, type=f.type.render(), qualifier=f.qualifier) for f in fields]


@dataclass
class Stateful:
    """A stateful operator found while planning (for output-mode checks)."""

    kind: str  # aggregate | window | session | join | dedup
    node: exp.Expr | None
    offset: int | None = None
    watermarked: bool = False


@dataclass
class PlanState:
    steps: list[Step] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sources: dict[str, Relation] = field(default_factory=dict)
    stateful: list[Stateful] = field(default_factory=list)

    def next_id(self, kind: str) -> str:
        self.counters[kind] += 1
        return f"{kind}-{self.counters[kind]}"


class Planning(Protocol):
    """The planner as the SELECT, join and whole-query checks see it (implemented by ``Planner``)."""

    text: SqlText
    state: PlanState

    def plan_from_item(self, item: exp.Expr) -> Relation: ...

    def plan_join(self, left: Relation, join: exp.Join) -> Relation: ...

    def add_filter(
        self, rel: Relation, node: exp.Expr, context: str, compiler: ExprCompiler | None = None
    ) -> Relation: ...

    def add_project(self, rel: Relation, items: list[tuple[str, Compiled, exp.Expr]]) -> Relation: ...

    def add_dedup(self, rel: Relation, node: exp.Expr) -> Relation: ...

    def select_items(self, sel: exp.Select, rel: Relation) -> list[tuple[str | None, exp.Expr]]: ...

    def output_name(self, explicit: str | None, node: exp.Expr, compiled: Compiled) -> str: ...
