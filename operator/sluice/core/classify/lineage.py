"""Where a step's columns come from: expressions expanded down to typed source columns.

A stateful operator's state is only meaningful under the exact expressions that fed it. Comparing
the operator's own parameters is not enough: ``GROUP BY k`` means something else when an upstream
projection changes ``k`` from ``upper(name)`` to ``lower(name)``, and an ``int`` source column that
becomes ``bigint`` changes ``sum(amount)``'s buffer. So every expression a stateful operator uses is
expanded through projections, filters, watermarks, unions and joins down to leaves that name the
source and column *and carry its type*; two plans keep a state's meaning only if these expansions
are equal. Renaming a column on the way (``x AS y`` then ``GROUP BY y``) expands to the same text,
and so does a projection that only passes a column through (``SELECT x FROM (SELECT x, y ...)``).
The output of an aggregation expands to what it computes (``n`` of ``count(*) AS n`` is
``count(*)``), so a column keeps its expansion under another name and changes it under the same one.

``Lineage(plan, display=True)`` expands without types and quotes, for sentences
(``upper(orders.customer)``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import cast

import sqlglot
from sqlglot import exp

from sluice.core.plan.model import (
    AggregateV1,
    FieldSpec,
    KafkaSourceV1,
    Plan,
    ProjectV1,
    SessionWindowAggregateV1,
    StreamStreamJoinV1,
    UnionV1,
    WindowAggregateV1,
)
from sluice.core.plan.steptypes import LineageRole, descriptor

_MAX_DEPTH = 64


def _role(step: object) -> LineageRole:
    found = descriptor(str(getattr(step, "type", "")))
    return found.lineage if found is not None else "leaf"


@lru_cache(maxsize=4096)
def _parse(expr: str) -> exp.Expression | None:
    try:
        return cast(exp.Expression, sqlglot.parse_one(expr, read="spark"))
    except Exception:
        return None


class Lineage:
    """Expands expressions of one plan down to typed source columns."""

    def __init__(self, plan: Plan, *, display: bool = False) -> None:
        self.plan = plan
        self.by_id = {s.id: s for s in plan.steps}
        self.display = display

    # -- graph -----------------------------------------------------------------------------
    def ancestors(self, step_id: str) -> set[str]:
        seen: set[str] = set()
        todo = list(self.by_id[step_id].inputs) if step_id in self.by_id else []
        while todo:
            sid = todo.pop()
            if sid in seen or sid not in self.by_id:
                continue
            seen.add(sid)
            todo.extend(self.by_id[sid].inputs)
        return seen

    def input_schema(self, step_id: str) -> list[FieldSpec]:
        step = self.by_id[step_id]
        fields: list[FieldSpec] = []
        for sid in step.inputs:
            if sid in self.by_id:
                fields.extend(self.by_id[sid].schema_)
        return fields

    # -- expansion -------------------------------------------------------------------------
    def expand(self, expr: str, step_ids: list[str], depth: int = 0) -> str:
        """Expand ``expr`` evaluated over the outputs of ``step_ids``."""
        tree = _parse(expr)
        if tree is None or depth > _MAX_DEPTH:
            return f"<opaque {expr!r} over {','.join(step_ids)}>"
        tree = tree.copy()

        def replace(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                leaf = self.column(node.name, node.table or None, step_ids, depth + 1)
                return exp.Identifier(this=leaf, quoted=not self.display)
            return node

        return tree.transform(replace).sql(dialect="spark")

    def _typed(self, text: str, typ: str) -> str:
        return text if self.display else f"{text}:{typ}"

    def _bare(self, expr: str) -> exp.Column | None:
        """The column ``expr`` is, if it is nothing but a column reference."""
        tree = _parse(expr)
        if isinstance(tree, exp.Column) and not isinstance(tree.this, exp.Star):
            return tree
        return None

    def column(self, name: str, qualifier: str | None, step_ids: list[str], depth: int) -> str:
        """Expansion of one column read from the outputs of ``step_ids``."""
        if depth > _MAX_DEPTH:
            return f"<deep {name}>"
        lname = name.lower()
        for sid in step_ids:
            step = self.by_id.get(sid)
            if step is None:
                continue
            match = [f for f in step.schema_ if f.name.lower() == lname]
            if qualifier is not None and len(match) > 1:
                match = [f for f in match if (f.qualifier or "").lower() == qualifier.lower()] or match
            if not match and _role(step) != "join":
                continue
            return self._resolve(step, name, qualifier, match[0] if match else None, depth)
        return f"<unresolved {qualifier + '.' if qualifier else ''}{name}>"

    def _resolve(
        self, step: object, name: str, qualifier: str | None, field: FieldSpec | None, depth: int
    ) -> str:
        typ = field.type if field is not None else "?"
        lname = name.lower()
        role = _role(step)
        if role == "source":
            return self._typed(f"{cast(KafkaSourceV1, step).source}.{name}", typ)
        if role == "project":
            project = cast(ProjectV1, step)
            for ne in project.expressions:
                if ne.name.lower() == lname:
                    bare = self._bare(ne.expr)
                    if bare is not None:  # a column passed through (maybe renamed): the column itself
                        return self.column(bare.name, bare.table or None, list(project.inputs), depth + 1)
                    inner = self.expand(ne.expr, list(project.inputs), depth)
                    return inner if self.display else f"({inner}):{typ}"
            return f"<unresolved {name} in {project.id}>"
        if role == "aggregate":
            found = self._aggregated(cast(AggregateV1, step), name, typ, depth)
            if found is not None:
                return found
        if role == "join":
            return self._joined(cast(StreamStreamJoinV1, step), name, qualifier, field, depth)
        if role == "union":
            parts = [self.column(name, None, [sid], depth + 1) for sid in cast(UnionV1, step).inputs]
            return self._typed(f"union({', '.join(parts)})", typ)
        if role == "pass-through":
            return self.column(name, qualifier, list(getattr(step, "inputs", [])), depth + 1)
        # a leaf: the output of a step read on its own (compared on its own)
        return self._typed(f"{getattr(step, 'id', '?')}.{name}", typ)

    def _joined(self, step: StreamStreamJoinV1, name: str, qualifier: str | None, field: FieldSpec | None,
                depth: int) -> str:
        """A join's output column: the same column of the side it comes from."""
        lname = name.lower()
        side = None
        qual = (qualifier or (field.qualifier if field else None) or "").lower()
        if qual == step.left_alias.lower():
            side = step.inputs[:1]
        elif qual == step.right_alias.lower():
            side = step.inputs[1:2]
        if side is None:
            # unqualified: the first side that has it
            for i, sid in enumerate(step.inputs):
                s = self.by_id.get(sid)
                if s is not None and any(f.name.lower() == lname for f in s.schema_):
                    side = step.inputs[i : i + 1]
                    break
        if not side:
            return f"<unresolved {name} in {step.id}>"
        return self.column(name, None, list(side), depth + 1)

    def _aggregated(
        self,
        step: AggregateV1 | WindowAggregateV1 | SessionWindowAggregateV1,
        name: str,
        typ: str,
        depth: int,
    ) -> str | None:
        """What an aggregation's output column ``name`` computes: its key, aggregate or window."""
        lname = name.lower()
        inputs = list(step.inputs)
        for key in step.keys:
            if key.name.lower() == lname:
                bare = self._bare(key.expr)
                if bare is not None:
                    return self.column(bare.name, bare.table or None, inputs, depth + 1)
                inner = self.expand(key.expr, inputs, depth + 1)
                return inner if self.display else f"({inner}):{typ}"
        text = None
        for agg in step.aggregates:
            if agg.name.lower() == lname:
                text = self.expand(agg.expr, inputs, depth + 1)
        if isinstance(step, WindowAggregateV1) and step.window.name.lower() == lname:
            w = step.window
            slide = f", {w.slide}" if w.slide else ""
            text = f"window({self.expand(w.column, inputs, depth + 1)}, {w.size}{slide})"
        if isinstance(step, SessionWindowAggregateV1) and step.session.name.lower() == lname:
            s = step.session
            text = f"session_window({self.expand(s.column, inputs, depth + 1)}, {s.gap})"
        return None if text is None else self._typed(text, typ)
