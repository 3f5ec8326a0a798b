"""Comparisons of stateless steps: watermarks, filters, projections, unions, sources, the sink."""

from __future__ import annotations

from typing import Any

from sluice.core.classify.comparison import IN_PLACE_ROWS, REPLACE, TRANSPARENT, Ctx, fmt
from sluice.core.plan.steptypes import STATEFUL


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


#: Stateful steps whose state (and its watermark eviction) is the same in update and append mode.
_SAME_STATE_IN_UPDATE_AND_APPEND = frozenset({"windowAggregateV1"})


def _update_to_append_on_windows(ctx: Ctx, old_mode: str, new_mode: str) -> bool:
    """update -> append where every stateful step of both plans is a windowed aggregation.

    Update mode emits a group whenever it changes and drops it silently once the watermark passes
    the window's end; append mode emits it at that moment. Switching update -> append therefore emits
    every window still in the state once more, with its final value (evidence: corpus pair 31). The
    other direction loses the windows waiting in the state (pair 37), and complete mode keeps groups
    that the other modes evicted: those stay ``topology``.
    """
    if (old_mode, new_mode) != ("update", "append"):
        return False
    types = [s.type for lin in (ctx.old, ctx.new) for s in lin.plan.steps if s.type in STATEFUL]
    return bool(types) and all(t in _SAME_STATE_IN_UPDATE_AND_APPEND for t in types)


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
        if _update_to_append_on_windows(ctx, old.output_mode, new.output_mode):
            ctx.add(
                "data-selection",
                new.id,
                "outputMode",
                old.output_mode,
                new.output_mode,
                f"Step {new.id}: output mode changed from {fmt(old.output_mode)} to "
                f"{fmt(new.output_mode)}. A windowed aggregation keeps the same state in both modes and "
                f"drops a window from it when the watermark passes the window's end; from the upgrade "
                f"on, each window is emitted once, with its final value, when it closes (windows "
                f"updated before the upgrade were already emitted with their values so far). On its "
                f"own this keeps state and offsets (in-place).",
            )
        elif ctx.stateful:
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
