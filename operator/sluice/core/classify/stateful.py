"""Comparisons of stateful operators: keys, aggregates, windows, sessions, joins, dedup.

Every expression is compared through :class:`~sluice.core.classify.lineage.Lineage`, expanded
down to typed source columns, so a change upstream that alters what the state means is caught.
"""

from __future__ import annotations

from typing import Any

from sluice.core.classify.comparison import REPLACE, UPSTREAM, Ctx, fmt, plain
from sluice.core.classify.lineage import Lineage


def _exp(lin: Lineage, step: Any, expr: str) -> str:
    return lin.expand(expr, list(step.inputs))


def _texts(ctx: Ctx, old: Any, new: Any, a: str, b: str, on_step: bool = False) -> tuple[str, str]:
    """The two texts to show for a changed expression: as written, or expanded if equal as written.

    ``on_step``: the expression is evaluated on the step's own output (a join's qualified columns).
    """
    if a != b:
        return a, b
    over_old, over_new = ([old.id], [new.id]) if on_step else (list(old.inputs), list(new.inputs))
    oa, nb = ctx.upstream(over_old, over_new, [a], [b])
    return oa[0], nb[0]


def _changed(a: Any, b: Any, same_text: bool) -> str:
    if same_text:
        return (
            f"has the same text, but reads columns computed differently upstream: {fmt(a)} before, "
            f"{fmt(b)} now"
        )
    return f"changed from {fmt(a)} to {fmt(b)}"


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
        if ov == nv:
            ov, nv = ctx.upstream(list(old.inputs), list(new.inputs), ov, nv)
            texts = fmt([k.expr for k in new.keys])
            what = f"{what} {texts} {UPSTREAM}: they read {fmt(ov)} before, {fmt(nv)} now"
        else:
            what = f"{what} changed from {fmt(ov)} to {fmt(nv)}"
        ctx.add(
            "topology",
            new.id,
            "keys",
            ov,
            nv,
            f"Step {new.id}: {what}. The state is keyed by "
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
    if oe == ne:
        oe, ne = ctx.upstream(list(old.inputs), list(new.inputs), oe, ne)
        texts = fmt([a.expr for a in new.aggregates])
        change = f"aggregates {texts} {UPSTREAM}: they read {fmt(oe)} before, {fmt(ne)} now"
    else:
        change = f"{detail}, from {fmt(oe)} to {fmt(ne)}"
    ctx.add(
        "topology",
        new.id,
        "aggregates",
        oe,
        ne,
        f"Step {new.id}: {change}. The state holds one buffer per "
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
        a, b = _texts(ctx, old, new, ow.column, nw.column)
        ctx.add(
            "topology",
            new.id,
            "window.column",
            a,
            b,
            f"Step {new.id}: the window's event-time column "
            f"{_changed(a, b, ow.column == nw.column)}. {REPLACE}",
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
        a, b = _texts(ctx, old, new, os_.column, ns.column)
        ctx.add(
            "topology",
            new.id,
            "session.column",
            a,
            b,
            f"Step {new.id}: the session's event-time column "
            f"{_changed(a, b, os_.column == ns.column)}. {REPLACE}",
        )
    _keys(ctx, old, new)
    _aggregates(ctx, old, new)
    return {"session", "keys", "aggregates"}


def _side_rows(lin: Lineage, step: Any, index: int) -> list[tuple[str, str, str]]:
    if index >= len(step.inputs) or step.inputs[index] not in lin.by_id:
        return []
    src = lin.by_id[step.inputs[index]]
    return [(f.name, f.type, lin.column(f.name, None, [src.id], 0)) for f in src.schema_]


def _join_type(ctx: Ctx, old: Any, new: Any) -> None:
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


def _join_key_pairs(lin: Lineage, step: Any) -> list[tuple[str, str]]:
    """The join's key pairs, expanded; qualified columns (o.x, p.y) are resolved on the join itself,
    which knows its sides."""
    return [(lin.expand(k.left, [step.id]), lin.expand(k.right, [step.id])) for k in step.keys]


def _join_key_texts(step: Any) -> list[str]:
    return [f"{k.left} = {k.right}" for k in step.keys]


def _join_keys(ctx: Ctx, old: Any, new: Any) -> None:
    if _join_key_pairs(ctx.old, old) == _join_key_pairs(ctx.new, new):
        return
    ov, nv = _join_key_texts(old), _join_key_texts(new)
    if ov == nv:
        ov, nv = ctx.upstream([old.id], [new.id], ov, nv)
        what = f"join keys {fmt(_join_key_texts(new))} {UPSTREAM}: {fmt(ov)} before, {fmt(nv)} now"
    else:
        what = f"join keys changed from {fmt(ov)} to {fmt(nv)}"
    ctx.add(
        "topology",
        new.id,
        "keys",
        ov,
        nv,
        f"Step {new.id}: {what}. Buffered rows are stored "
        f"under the old keys; Spark checks key types only and would silently miss matches. {REPLACE}",
    )


#: the join's conditions: attribute, and its name in the plan and in messages
_JOIN_CONDITIONS = (("time_condition", "timeCondition"), ("condition", "condition"))


def _join_conditions(ctx: Ctx, old: Any, new: Any) -> None:
    """The time condition and the other condition; a condition change that comes with a change of
    keys is not reported again (the keys' change says it)."""
    for fld, label in _JOIN_CONDITIONS:
        a, b = getattr(old, fld), getattr(new, fld)
        ea = ctx.old.expand(a, [old.id]) if a else None
        eb = ctx.new.expand(b, [new.id]) if b else None
        if ea == eb or (
            fld == "condition" and any(c.step == new.id and c.field == "keys" for c in ctx.changes)
        ):
            continue
        if a and b and a == b:
            a, b = _texts(ctx, old, new, a, b, on_step=True)
            what = _changed(a, b, True)
        else:
            what = f"changed from {fmt(a)} to {fmt(b)}"
        ctx.add(
            "topology",
            new.id,
            label,
            a,
            b,
            f"Step {new.id}: join {label} {what}. It decides which "
            f"buffered rows are kept and when they expire. {REPLACE}",
        )


def _buffered_rows(ctx: Ctx, old: Any, new: Any, index: int, side: str) -> None:
    """The rows of one input (``index`` 0: left, 1: right) that the join buffers in its state."""
    orows, nrows = _side_rows(ctx.old, old, index), _side_rows(ctx.new, new, index)
    if orows == nrows:
        return
    oc = [f"{n} {t}" for n, t, _ in orows]
    nc = [f"{n} {t}" for n, t, _ in nrows]
    if oc != nc:
        what = f"changed (columns) from {fmt(oc)} to {fmt(nc)}"
    else:
        pairs = [(o, n) for o, n in zip(orows, nrows, strict=True) if o != n]
        oc = [f"{o[0]} = {plain(o[2])}" for o, _ in pairs]
        nc = [f"{n[0]} = {plain(n[2])}" for _, n in pairs]
        what = (
            f"have the same columns, but some are computed differently upstream: {fmt(oc)} "
            f"before, {fmt(nc)} now"
        )
    ctx.add(
        "topology",
        new.id,
        f"{side}Input",
        oc,
        nc,
        f"Step {new.id}: the {side} input rows buffered in the join state {what}. {REPLACE}",
    )


def _join(ctx: Ctx, old: Any, new: Any) -> set[str]:
    _join_type(ctx, old, new)
    _join_keys(ctx, old, new)
    _join_conditions(ctx, old, new)
    for index, side in enumerate(("left", "right")):
        _buffered_rows(ctx, old, new, index, side)
    # aliases only qualify names; their effect is visible in keys/conditions above.
    return {"join_type", "keys", "time_condition", "condition", "left_alias", "right_alias"}


def _dedup(ctx: Ctx, old: Any, new: Any) -> set[str]:
    oc = [ctx.old.column(c, None, list(old.inputs), 0) for c in old.columns]
    nc = [ctx.new.column(c, None, list(new.inputs), 0) for c in new.columns]
    if oc != nc:
        ov, nv = list(old.columns), list(new.columns)
        if ov == nv:
            ov = [plain(ctx.old_display.column(c, None, list(old.inputs), 0)) for c in old.columns]
            nv = [plain(ctx.new_display.column(c, None, list(new.inputs), 0)) for c in new.columns]
            if ov == nv:
                ov, nv = [plain(x) for x in oc], [plain(x) for x in nc]
            what = f"{fmt(list(new.columns))} {UPSTREAM}: they read {fmt(ov)} before, {fmt(nv)} now"
        else:
            what = f"changed from {fmt(ov)} to {fmt(nv)}"
        ctx.add(
            "topology",
            new.id,
            "columns",
            ov,
            nv,
            f"Step {new.id}: deduplication columns {what}. The state remembers "
            f"the old column values, so duplicates would "
            f"be judged against the wrong key. {REPLACE}",
        )
    return {"columns"}
