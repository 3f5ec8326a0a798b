"""Comparison of one step of the old plan with the step of the same id in the new plan.

Every field of every step type is either compared by a rule here or listed as ignored with the
reason; a field that differs and has no rule is reported as a topology change (conservative: an
unknown difference must never be applied in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluice.core.classify.lineage import Lineage
from sluice.core.classify.model import Category, Change
from sluice.core.plan.model import STATEFUL_STEP_TYPES, FieldSpec

UPSTREAM_NOTE = " (the same text, but the columns it reads are computed differently upstream or changed type)"
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
_STRUCTURAL = {"id", "inputs", "schema_", "type"}


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


@dataclass
class Ctx:
    old: Lineage
    new: Lineage
    stateful: bool  # either plan has a stateful operator
    sink_topic: str
    changes: list[Change] = field(default_factory=list)

    def add(self, category: Category, step: str | None, fld: str, old: Any, new: Any, message: str) -> None:
        self.changes.append(
            Change(category=category, step=step, field=fld, old=old, new=new, message=message)
        )


def _dump(step: Any) -> dict[str, Any]:
    data: dict[str, Any] = step.model_dump(mode="json")
    return data


def compare_step(ctx: Ctx, old: Any, new: Any) -> None:
    """Append the changes between two steps with the same id and type."""
    handler = _HANDLERS.get(new.type)
    handled: set[str] = set()
    if handler is not None:
        handled = handler(ctx, old, new)
    if new.type in STATEFUL_STEP_TYPES:
        handled |= _state_types(ctx, old, new)
    od, nd = _dump(old), _dump(new)
    for key in sorted(set(od) | set(nd)):
        if key in handled or key in _STRUCTURAL:
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


# -- stateful operators ------------------------------------------------------------------------


def _exp(lin: Lineage, step: Any, expr: str) -> str:
    return lin.expand(expr, list(step.inputs))


def _state_types(ctx: Ctx, old: Any, new: Any) -> set[str]:
    """Output types of a stateful operator (the types of its state) compared by position."""
    if new.type == "streamStreamJoinV1":
        return set()  # the join stores its input rows; compared in _join
    ot = [f.type for f in old.schema_]
    nt = [f.type for f in new.schema_]
    if ot != nt and not any(c.step == new.id and c.category == "topology" for c in ctx.changes):
        ctx.add(
            "topology",
            new.id,
            "schema.types",
            ot,
            nt,
            f"Step {new.id}: the types of the operator's output (its state) changed from {fmt(ot)} "
            f"to {fmt(nt)}. {REPLACE}",
        )
    return set()


def _keys(ctx: Ctx, old: Any, new: Any, what: str = "grouping keys") -> None:
    ok = [_exp(ctx.old, old, k.expr) for k in old.keys]
    nk = [_exp(ctx.new, new, k.expr) for k in new.keys]
    if ok != nk:
        ov = [k.expr for k in old.keys]
        nv = [k.expr for k in new.keys]
        note = UPSTREAM_NOTE if ov == nv else ""
        ctx.add(
            "topology",
            new.id,
            "keys",
            ov,
            nv,
            f"Step {new.id}: {what} changed from {fmt(ov)} to {fmt(nv)}{note}. The state is keyed by "
            f"them; Spark compares state schemas by type only and would silently reuse the old "
            f"groups. {REPLACE}",
        )


def _aggregates(ctx: Ctx, old: Any, new: Any) -> None:
    def sig(lin: Lineage, step: Any) -> list[tuple[str, list[str]]]:
        return [
            (a.function, [_exp(lin, step, x) if x != "*" else "*" for x in a.args]) for a in step.aggregates
        ]

    os_, ns = sig(ctx.old, old), sig(ctx.new, new)
    if os_ == ns:
        return
    oe = [a.expr for a in old.aggregates]
    ne = [a.expr for a in new.aggregates]
    ofun = [a.function for a in old.aggregates]
    nfun = [a.function for a in new.aggregates]
    if len(os_) == len(ns) and ofun != nfun:
        detail = "aggregate functions changed"
    elif len(os_) < len(ns):
        detail = "aggregates were added"
    elif len(os_) > len(ns):
        detail = "aggregates were removed"
    else:
        detail = "aggregate arguments changed"
    note = UPSTREAM_NOTE if oe == ne else ""
    ctx.add(
        "topology",
        new.id,
        "aggregates",
        oe,
        ne,
        f"Step {new.id}: {detail}, from {fmt(oe)} to {fmt(ne)}{note}. The state holds one buffer per "
        f"aggregate, in order; Spark checks state schemas by type only, so a change that keeps the "
        f"buffer types (count -> sum of a bigint) passes unnoticed. {REPLACE}",
    )


def _aggregate(ctx: Ctx, old: Any, new: Any) -> set[str]:
    _keys(ctx, old, new)
    _aggregates(ctx, old, new)
    return {"keys", "aggregates"}


def _window(ctx: Ctx, old: Any, new: Any) -> set[str]:
    ow, nw = old.window, new.window
    for attr, label in (("size", "window size"), ("slide", "window slide")):
        a, b = getattr(ow, attr), getattr(nw, attr)
        if a != b:
            ctx.add(
                "topology",
                new.id,
                f"window.{attr}",
                a,
                b,
                f"Step {new.id}: {label} changed from {fmt(a)} to {fmt(b)}. Open windows in the "
                f"state have the old bounds and would be mixed with new ones. {REPLACE}",
            )
    oc, nc = _exp(ctx.old, old, ow.column), _exp(ctx.new, new, nw.column)
    if oc != nc:
        ctx.add(
            "topology",
            new.id,
            "window.column",
            ow.column,
            nw.column,
            f"Step {new.id}: the window's event-time column changed from {fmt(ow.column)} to "
            f"{fmt(nw.column)}. {REPLACE}",
        )
    _keys(ctx, old, new)
    _aggregates(ctx, old, new)
    # window.name only names the output column: reported by the output schema comparison.
    return {"window", "keys", "aggregates"}


def _session(ctx: Ctx, old: Any, new: Any) -> set[str]:
    os_, ns = old.session, new.session
    if os_.gap != ns.gap:
        ctx.add(
            "topology",
            new.id,
            "session.gap",
            os_.gap,
            ns.gap,
            f"Step {new.id}: session gap changed from {fmt(os_.gap)} to {fmt(ns.gap)}. Sessions in "
            f"the state were merged with the old gap. {REPLACE}",
        )
    oc, nc = _exp(ctx.old, old, os_.column), _exp(ctx.new, new, ns.column)
    if oc != nc:
        ctx.add(
            "topology",
            new.id,
            "session.column",
            os_.column,
            ns.column,
            f"Step {new.id}: the session's event-time column changed from {fmt(os_.column)} to "
            f"{fmt(ns.column)}. {REPLACE}",
        )
    _keys(ctx, old, new)
    _aggregates(ctx, old, new)
    return {"session", "keys", "aggregates"}


def _side_rows(lin: Lineage, step: Any, index: int) -> list[tuple[str, str, str]]:
    if index >= len(step.inputs) or step.inputs[index] not in lin.by_id:
        return []
    src = lin.by_id[step.inputs[index]]
    return [(f.name, f.type, lin.column(f.name, None, [src.id], 0)) for f in src.schema_]


def _join(ctx: Ctx, old: Any, new: Any) -> set[str]:
    if old.join_type != new.join_type:
        ctx.add(
            "topology",
            new.id,
            "joinType",
            old.join_type,
            new.join_type,
            f"Step {new.id}: join type changed from {fmt(old.join_type)} to {fmt(new.join_type)}. "
            f"Outer joins keep per-row match flags in the state that an inner join never wrote "
            f"(Spark does not detect this when it restarts). {REPLACE}",
        )

    def keys(lin: Lineage, step: Any) -> list[tuple[str, str]]:
        return [
            (lin.expand(k.left, list(step.inputs)), lin.expand(k.right, list(step.inputs))) for k in step.keys
        ]

    if keys(ctx.old, old) != keys(ctx.new, new):
        ov = [f"{k.left} = {k.right}" for k in old.keys]
        nv = [f"{k.left} = {k.right}" for k in new.keys]
        ctx.add(
            "topology",
            new.id,
            "keys",
            ov,
            nv,
            f"Step {new.id}: join keys changed from {fmt(ov)} to {fmt(nv)}. Buffered rows are stored "
            f"under the old keys; Spark checks key types only and would silently miss matches. {REPLACE}",
        )
    for fld, label in (("time_condition", "timeCondition"), ("condition", "condition")):
        a, b = getattr(old, fld), getattr(new, fld)
        ea = ctx.old.expand(a, list(old.inputs)) if a else None
        eb = ctx.new.expand(b, list(new.inputs)) if b else None
        if ea != eb and not (
            fld == "condition" and any(c.step == new.id and c.field == "keys" for c in ctx.changes)
        ):
            ctx.add(
                "topology",
                new.id,
                label,
                a,
                b,
                f"Step {new.id}: join {label} changed from {fmt(a)} to {fmt(b)}. It decides which "
                f"buffered rows are kept and when they expire. {REPLACE}",
            )
    for i, side in enumerate(("left", "right")):
        orows, nrows = _side_rows(ctx.old, old, i), _side_rows(ctx.new, new, i)
        if orows != nrows:
            oc = [f"{n} {t}" for n, t, _ in orows]
            nc = [f"{n} {t}" for n, t, _ in nrows]
            why = "columns" if oc != nc else "column definitions upstream"
            ctx.add(
                "topology",
                new.id,
                f"{side}Input",
                oc,
                nc,
                f"Step {new.id}: the {side} input rows buffered in the join state changed "
                f"({why}) from {fmt(oc)} to {fmt(nc)}. {REPLACE}",
            )
    # aliases only qualify names; their effect is visible in keys/conditions above.
    return {"join_type", "keys", "time_condition", "condition", "left_alias", "right_alias"}


def _dedup(ctx: Ctx, old: Any, new: Any) -> set[str]:
    oc = [ctx.old.column(c, None, list(old.inputs), 0) for c in old.columns]
    nc = [ctx.new.column(c, None, list(new.inputs), 0) for c in new.columns]
    if oc != nc:
        ctx.add(
            "topology",
            new.id,
            "columns",
            old.columns,
            new.columns,
            f"Step {new.id}: deduplication columns changed from {fmt(old.columns)} to "
            f"{fmt(new.columns)}{UPSTREAM_NOTE if old.columns == new.columns else ''}. The state remembers "
            f"the old column values, so duplicates would "
            f"be judged against the wrong key. {REPLACE}",
        )
    return {"columns"}


# -- stateless steps ---------------------------------------------------------------------------


def _watermark(ctx: Ctx, old: Any, new: Any) -> set[str]:
    if old.column != new.column:
        if ctx.stateful:
            ctx.add(
                "topology",
                new.id,
                "column",
                old.column,
                new.column,
                f"Step {new.id}: watermark column changed from {fmt(old.column)} to {fmt(new.column)}. "
                f"The checkpoint's watermark and the state's eviction were computed from the old "
                f"column. {REPLACE}",
            )
        else:
            ctx.add(
                "transparent",
                new.id,
                "column",
                old.column,
                new.column,
                f"Step {new.id}: watermark column changed from {fmt(old.column)} to {fmt(new.column)}; "
                f"no stateful operator uses it. {TRANSPARENT}",
            )
    if old.delay != new.delay:
        if ctx.stateful:
            ctx.add(
                "data-selection",
                new.id,
                "delay",
                old.delay,
                new.delay,
                f"Step {new.id}: watermark delay changed from {fmt(old.delay)} to {fmt(new.delay)}. It "
                f"changes which late records are still accepted and when windows are final, starting "
                f"from the watermark the checkpoint restores (Spark never moves a watermark back, so a "
                f"longer delay only takes effect once event time has caught up). The state's layout "
                f"and meaning do not change; {IN_PLACE_ROWS[0].lower()}{IN_PLACE_ROWS[1:]}",
            )
        else:
            ctx.add(
                "transparent",
                new.id,
                "delay",
                old.delay,
                new.delay,
                f"Step {new.id}: watermark delay changed from {fmt(old.delay)} to {fmt(new.delay)}; no "
                f"stateful operator uses it. {TRANSPARENT}",
            )
    return {"column", "delay"}


def _filter(ctx: Ctx, old: Any, new: Any) -> set[str]:
    if old.condition != new.condition:
        ctx.add(
            "data-selection",
            new.id,
            "condition",
            old.condition,
            new.condition,
            f"Step {new.id}: condition changed from {fmt(old.condition)} to {fmt(new.condition)}. "
            f"{IN_PLACE_ROWS}",
        )
    return {"condition"}


def _project(ctx: Ctx, old: Any, new: Any) -> set[str]:
    oe = {e.name: e.expr for e in old.expressions}
    ne = {e.name: e.expr for e in new.expressions}
    for name in [e.name for e in old.expressions] + [e.name for e in new.expressions if e.name not in oe]:
        a, b = oe.get(name), ne.get(name)
        if a == b:
            continue
        if a is None:
            what = f"expression {fmt(name)} was added ({fmt(b)})"
        elif b is None:
            what = f"expression {fmt(name)} was removed (was {fmt(a)})"
        else:
            what = f"expression {fmt(name)} changed from {fmt(a)} to {fmt(b)}"
        ctx.add(
            "data-selection",
            new.id,
            f"expressions.{name}",
            a,
            b,
            f"Step {new.id}: {what}. {IN_PLACE_ROWS} (Operator state that depends on it is reported "
            f"separately.)",
        )
    if [e.name for e in old.expressions if e.name in ne] != [e.name for e in new.expressions if e.name in oe]:
        ctx.add(
            "data-selection",
            new.id,
            "expressions",
            [e.name for e in old.expressions],
            [e.name for e in new.expressions],
            f"Step {new.id}: the order of the projected columns changed from "
            f"{fmt([e.name for e in old.expressions])} to {fmt([e.name for e in new.expressions])}. "
            f"{IN_PLACE_ROWS}",
        )
    return {"expressions"}


def _union(ctx: Ctx, old: Any, new: Any) -> set[str]:
    return set()  # inputs are the sources; a change of sources is reported by the source rules


def _source(ctx: Ctx, old: Any, new: Any) -> set[str]:
    if old.topic != new.topic:
        ctx.add(
            "source-modifying",
            new.id,
            "topic",
            old.topic,
            new.topic,
            f"Step {new.id}: source {fmt(new.source)} now reads topic {fmt(new.topic)} instead of "
            f"{fmt(old.topic)}. The checkpoint's offsets belong to the old topic, so the query needs a "
            f"new checkpoint (replace), reading the new topic from its starting offsets.",
        )
    ocols = {c.name: c.type for c in old.columns}
    ncols = {c.name: c.type for c in new.columns}
    for name in list(ocols) + [n for n in ncols if n not in ocols]:
        a, b = ocols.get(name), ncols.get(name)
        if a == b:
            continue
        what = (
            f"added ({b})"
            if a is None
            else f"removed (was {a})"
            if b is None
            else f"retyped from {fmt(a)} to {fmt(b)}"
        )
        ctx.add(
            "data-selection",
            new.id,
            f"columns.{name}",
            a,
            b,
            f"Step {new.id}: source column {fmt(name)} {what}; records are parsed with the new schema "
            f"from now on (operators whose state depends on this column are reported separately). "
            f"{IN_PLACE_ROWS}",
        )
    if old.starting_offsets != new.starting_offsets:
        ctx.add(
            "transparent",
            new.id,
            "startingOffsets",
            old.starting_offsets,
            new.starting_offsets,
            f"Step {new.id}: startingOffsets changed from {fmt(old.starting_offsets)} to "
            f"{fmt(new.starting_offsets)}; it only applies when a query starts without a checkpoint. "
            f"{TRANSPARENT}",
        )
    if old.max_offsets_per_trigger != new.max_offsets_per_trigger:
        ctx.add(
            "transparent",
            new.id,
            "maxOffsetsPerTrigger",
            old.max_offsets_per_trigger,
            new.max_offsets_per_trigger,
            f"Step {new.id}: rate limit maxOffsetsPerTrigger changed from "
            f"{fmt(old.max_offsets_per_trigger)} to {fmt(new.max_offsets_per_trigger)}. {TRANSPARENT}",
        )
    om, nm = old.malformed.model_dump(mode="json"), new.malformed.model_dump(mode="json")
    if om != nm:
        ctx.add(
            "data-selection",
            new.id,
            "malformed",
            om,
            nm,
            f"Step {new.id}: malformed-record handling changed from {fmt(om)} to {fmt(nm)}. {IN_PLACE_ROWS}",
        )
    return {"topic", "columns", "starting_offsets", "max_offsets_per_trigger", "malformed", "source"}


def _sink(ctx: Ctx, old: Any, new: Any) -> set[str]:
    if old.topic != new.topic:
        ctx.add(
            "data-selection",
            new.id,
            "topic",
            old.topic,
            new.topic,
            f"Step {new.id}: sink topic changed from {fmt(old.topic)} to {fmt(new.topic)}. Records "
            f"produced after the upgrade go to the new topic and earlier results stay in the old one; "
            f"on its own this keeps state and offsets (in-place). Use a replace with backfill if the "
            f"new topic "
            f"needs the full history.",
        )
    if old.key != new.key:
        ctx.add(
            "schema-evolution",
            new.id,
            "key",
            old.key,
            new.key,
            f"Step {new.id}: record key changed from {fmt(old.key)} to {fmt(new.key)}. Records "
            f"produced after the upgrade are keyed (and partitioned) differently, which matters to "
            f"consumers reading {fmt(new.topic)} as a table; on its own this keeps state and offsets "
            f"(in-place).",
        )
    if old.output_mode != new.output_mode:
        if ctx.stateful:
            ctx.add(
                "topology",
                new.id,
                "outputMode",
                old.output_mode,
                new.output_mode,
                f"Step {new.id}: output mode changed from {fmt(old.output_mode)} to "
                f"{fmt(new.output_mode)}. Which state has already been emitted depends on the mode: "
                f"groups waiting in the state would be lost or emitted twice. {REPLACE}",
            )
        else:
            ctx.add(
                "transparent",
                new.id,
                "outputMode",
                old.output_mode,
                new.output_mode,
                f"Step {new.id}: output mode changed from {fmt(old.output_mode)} to "
                f"{fmt(new.output_mode)}; for a query without state both emit every row once. {TRANSPARENT}",
            )
    if old.delivery != new.delivery:
        ctx.add(
            "transparent",
            new.id,
            "delivery",
            old.delivery,
            new.delivery,
            f"Step {new.id}: delivery changed from {fmt(old.delivery)} to {fmt(new.delivery)}; "
            f"applies from the next micro-batch. {TRANSPARENT}",
        )
    ot, nt = old.trigger.processing_time, new.trigger.processing_time
    if ot != nt:
        ctx.add(
            "transparent",
            new.id,
            "trigger.processingTime",
            ot,
            nt,
            f"Step {new.id}: trigger interval changed from {fmt(ot)} to {fmt(nt)}. {TRANSPARENT}",
        )
    return {"topic", "key", "output_mode", "delivery", "trigger"}


_HANDLERS = {
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

KNOWN_STEP_TYPES = frozenset(_HANDLERS)


def field_list(fields: list[FieldSpec]) -> list[str]:
    return [f"{f.name} {f.type}" for f in fields]
