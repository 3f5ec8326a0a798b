"""``classify(old, new, policy)``: what an upgrade from one pinned plan to another needs.

Rules (docs/upgrades.md explains each with the Spark evidence):
- same content -> ``none``;
- plan format downgrade, unknown format or step types -> ``unsupported`` -> ``reject``;
- pinned settings, Spark version, stateful operators (added, removed, reordered, their keys,
  aggregates, windows, session gaps, join type/keys/conditions, buffered join rows, dedup columns,
  watermarks feeding them, the output mode of a stateful query except update -> append over
  windowed aggregations only) -> ``topology`` -> ``replace``;
- source topics or the set of sources -> ``source-modifying`` -> ``replace``;
- output columns added/removed/renamed/retyped/reordered, sink key -> ``schema-evolution`` ->
  ``in-place`` (a change that also touches state is reported separately as topology, which wins);
- filters, HAVING, projections not feeding state, source columns, sink topic, malformed handling,
  output mode update -> append when every stateful operator is a windowed aggregation
  -> ``data-selection`` -> ``in-place``;
- trigger interval, rate limit, starting offsets, delivery -> ``transparent`` -> ``in-place``;
- spec fields outside the plan that change how the query runs (pod resources, restart nonce, sink
  topic creation settings; ``old_spec``/``new_spec``, see :mod:`sluice.core.classify.runtime`)
  -> ``transparent`` -> ``in-place``.
The most severe category decides; ``replace`` becomes ``reject`` when the policy forbids it.
Steps are paired by their place in the plan, not by their (positional) ids
(:mod:`sluice.core.classify.match`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.core import sparkversion
from sluice.core.classify.comparison import IN_PLACE_ROWS, plain
from sluice.core.classify.lineage import Lineage
from sluice.core.classify.match import Matching, match
from sluice.core.classify.model import (
    DECISION_FOR,
    SEVERITY,
    Category,
    Change,
    UpgradeDecision,
    change,
    severity,
)
from sluice.core.classify.runtime import runtime_changes
from sluice.core.classify.steps import KNOWN_STEP_TYPES, REPLACE, TRANSPARENT, Ctx, compare_step, fmt
from sluice.core.plan import meaning
from sluice.core.plan.model import PLAN_FORMAT_VERSION, FieldSpec, Plan
from sluice.core.plan.steptypes import STATEFUL
from sluice.core.replace import state_reset_note
from sluice.core.spec import UpgradePolicy

_SETTING_NAMES = {
    "shuffle_partitions": "spark.sql.shuffle.partitions (spec.shufflePartitions)",
    "state_store_provider": "spark.sql.streaming.stateStore.providerClass",
    "changelog_checkpointing": "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
    "state_format": "spark.sql.streaming.stateStore.encodingFormat",
}


def _decide(changes: list[Change], policy: UpgradePolicy, old: Plan, new: Plan) -> UpgradeDecision:
    category: Category = "none"
    for c in changes:
        if severity(c.category) > severity(category):
            category = c.category
    decision = DECISION_FOR[category]
    ordered = sorted(changes, key=lambda c: -SEVERITY.index(c.category))
    reasons = [c.message for c in ordered]
    if decision == "replace" and not policy.allow_replace:
        decision = "reject"
        reasons.insert(
            0,
            f"This {category} change needs a new checkpoint (replace), but spec.upgrade.allowReplace is "
            f"false: set spec.upgrade.allowReplace to true to allow a replace "
            f"(strategy {policy.replace_strategy}), or revert the change.",
        )
    elif decision == "reject":
        reasons.insert(
            0,
            "Nothing can carry this change out: the operator refuses it and keeps the "
            "running query unchanged.",
        )
    elif decision == "replace":
        how = (
            "the new query starts reading where the old one's output ends, into the same topic (handOff)"
            if policy.replace_strategy == "handOff"
            else (f"the new query re-reads its sources from {policy.backfill_from or 'the earliest offsets'} "
                  f"into a versioned topic ({new.sink.topic}-v<next plan version>, unless the edit names "
                  f"a new sink topic) beside the old one, which serves until the new one is at most "
                  f"{policy.max_lag_records} records behind (backfill)")
        )
        reasons.append(f"The query is replaced by one with a new checkpoint: {how}; {state_reset_note(new)}.")
    elif decision == "none":
        reasons = [
            "The new plan is identical to the running plan (same hash) and so is every spec field that "
            "changes how it runs: nothing to do."
        ]
    return UpgradeDecision(
        category=category,
        decision=decision,
        reasons=reasons,
        changes=changes,
        old_hash=old.hash or old.compute_hash(),
        new_hash=new.hash or new.compute_hash(),
    )


def _unsupported(old: Plan, new: Plan) -> list[Change]:
    version_problems: list[str] = []
    if new.version < old.version:
        version_problems.append(
            f"Plan format version would go down from {old.version} to {new.version}; "
            f"a checkpoint written by a newer plan format cannot be continued by an "
            f"older one. Recompile the query with the current compiler."
        )
    if new.version > PLAN_FORMAT_VERSION:
        version_problems.append(
            f"Plan format version {new.version} is newer than this classifier "
            f"understands ({PLAN_FORMAT_VERSION}); upgrade the operator first."
        )
    out = [
        change("unsupported", "plan", "version", old.version, new.version, message)
        for message in version_problems
    ]
    for label, plan in (("old", old), ("new", new)):
        for step in plan.steps:
            step_type = getattr(step, "type", None)
            if step_type not in KNOWN_STEP_TYPES:
                out.append(
                    change(
                        "unsupported",
                        getattr(step, "id", None),
                        "type",
                        step_type if label == "old" else None,
                        step_type if label == "new" else None,
                        f"Step {getattr(step, 'id', '?')} of the {label} plan has step type "
                        f"{fmt(step_type)}, which this classifier does not know; "
                        f"upgrade the operator first.",
                    )
                )
    return out


def _settings(old: Plan, new: Plan, stateful: bool) -> list[Change]:
    """The pinned settings (``sluice.core.plan.meaning``) and the plan's Spark version."""
    out: list[Change] = []
    od, nd = old.settings.model_dump(mode="json"), new.settings.model_dump(mode="json")
    od_conf, nd_conf = od.pop("conf", None), nd.pop("conf", None)
    for key in sorted(set(od) | set(nd)):
        if od.get(key) != nd.get(key):
            name = _SETTING_NAMES.get(key, key)
            out.append(change("topology", "settings", key, od.get(key), nd.get(key),
                              f"Pinned setting {name} changed from {fmt(od.get(key))} to "
                              f"{fmt(nd.get(key))}. The checkpoint pins it: Spark restores the old "
                              f"value and silently ignores the new one (state is partitioned by it). "
                              f"The query needs a new checkpoint (replace)."))
    if od_conf is not None or nd_conf is not None:
        out += _meaning_changes(od_conf or {}, nd_conf or {}, stateful, unpinned=od_conf is None)
    if old.spark_version != new.spark_version:
        try:
            moved = sparkversion.move(old.spark_version, new.spark_version)
        except sparkversion.BadVersion as exc:
            moved = sparkversion.Move("major", str(exc))
        category: Category = ("transparent" if moved.allowed else "unsupported")
        out.append(change(category, "plan", "sparkVersion", old.spark_version, new.spark_version,
                          f"The plan's Spark version changed: {moved.message}."))
    return out


def _meaning_changes(old: dict[str, str], new: dict[str, str], stateful: bool, *,
                     unpinned: bool) -> list[Change]:
    """One change per pinned setting of ``settings.conf`` that differs. ``unpinned``: the old plan
    pinned none of them (compiled before they were pinned): what it ran with was the engine's
    default, which the new plan now pins."""
    out: list[Change] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b or (unpinned and a is None):
            continue
        rule = meaning.BY_KEY.get(key)
        what = rule.what if rule else key
        if rule is not None and rule.kind == "checkpoint":
            out.append(change("topology", "settings", f"conf.{key}", a, b,
                              f"Pinned setting {key} ({what}) changed from {fmt(a)} to {fmt(b)}. Spark "
                              f"keeps it in the checkpoint and restores the old value on restart, "
                              f"ignoring the new one. {REPLACE}"))
        elif stateful:
            out.append(change("topology", "settings", f"conf.{key}", a, b,
                              f"Pinned setting {key} ({what}) changed from {fmt(a)} to {fmt(b)}: it changes "
                              f"results, and the query's state was built under the old value. {REPLACE}"))
        else:
            out.append(change("data-selection", "settings", f"conf.{key}", a, b,
                              f"Pinned setting {key} ({what}) changed from {fmt(a)} to {fmt(b)}: records "
                              f"processed after the upgrade get the new value. {IN_PLACE_ROWS}"))
    return out


def _added_removed(step: Any, added: bool, stateful_plan: bool) -> Change:
    verb = "added" if added else "removed"
    st = step.type
    desc = f"Step {step.id} ({st}) was {verb}"
    old, new = (None, st) if added else (st, None)
    category: Category
    if st in STATEFUL:
        category = "topology"
        why = (
            f": the set of stateful operators changes and the checkpoint's state "
            f"operators no longer match the plan. {REPLACE}"
        )
    elif st in ("kafkaSourceV1", "unionV1"):
        what = (
            f"source {fmt(getattr(step, 'source', step.id))} (topic {fmt(getattr(step, 'topic', None))})"
            if st == "kafkaSourceV1"
            else "the union of sources"
        )
        category = "source-modifying"
        why = (
            f": {what} {verb}. The set of sources changes, and the checkpoint's "
            f"offsets cover the old set only, so the query needs a new checkpoint (replace)."
        )
    elif st == "watermarkV1" and stateful_plan:
        category, why = "topology", f": the watermark decides when state is emitted and evicted. {REPLACE}"
    elif st == "watermarkV1":
        category, why = "transparent", f"; no stateful operator uses it. {TRANSPARENT}"
    elif st == "kafkaSinkV1":
        category, why = "topology", f": the sink changes. {REPLACE}"
    else:
        category = "data-selection"
        why = (
            "; it does not hold state, so it only changes which records or columns are "
            "emitted from now on. On its own this keeps state and offsets (in-place)."
        )
    return change(category, step.id, "steps", old, new, desc + why)


def _definitions(lin: Lineage, plan: Plan) -> dict[str, str]:
    """What every output column computes, expanded down to source columns."""
    sink = plan.sink
    return {f.name: lin.column(f.name, None, list(sink.inputs), 0) for f in plan.output_schema}


@dataclass(frozen=True)
class _OutputColumns:
    """The output columns of both plans: their types, what they compute, and how to show that."""

    sink_id: str
    topic: str
    old: list[FieldSpec]
    new: list[FieldSpec]
    old_types: dict[str, str]
    new_types: dict[str, str]
    #: typed expansions down to source columns: what is compared
    old_defs: dict[str, str]
    new_defs: dict[str, str]
    #: display expansions: what a message shows
    old_shown: dict[str, str]
    new_shown: dict[str, str]

    @classmethod
    def of(cls, old_plan: Plan, new_plan: Plan, olin: Lineage, nlin: Lineage) -> _OutputColumns:
        old, new = list(old_plan.output_schema), list(new_plan.output_schema)
        return cls(
            sink_id=new_plan.sink.id,
            topic=new_plan.sink.topic,
            old=old,
            new=new,
            old_types={f.name: f.type for f in old},
            new_types={f.name: f.type for f in new},
            old_defs=_definitions(olin, old_plan),
            new_defs=_definitions(nlin, new_plan),
            old_shown=_definitions(Lineage(old_plan, display=True), old_plan),
            new_shown=_definitions(Lineage(new_plan, display=True), new_plan),
        )

    @property
    def tail(self) -> str:
        """The sentence that ends the message of a schema-evolution change of the output columns."""
        return (
            f"Consumers of topic {fmt(self.topic)} see this from the next record on; the column change "
            f"by itself touches no operator state, "
            f"so on its own this keeps state and offsets (in-place)."
        )

    def change(self, old: Any, new: Any, message: str, fld: str = "outputSchema",
               category: Category = "schema-evolution") -> Change:
        """A change of the sink's output schema; ``message`` follows ``Step <sink id>: ``."""
        return change(category, self.sink_id, fld, old, new, f"Step {self.sink_id}: {message}")

    def redefines(self, f: FieldSpec) -> bool:
        """New column ``f`` has an old column of its name and type that computed something else."""
        return (
            f.name in self.old_types
            and self.old_types[f.name] == f.type
            and self.old_defs.get(f.name) != self.new_defs.get(f.name)
        )


@dataclass(frozen=True)
class _Rename:
    """An output column at the same position with another name (neither on the other side)."""

    old: FieldSpec
    new: FieldSpec


def _renames(cols: _OutputColumns) -> list[_Rename]:
    """Renamed columns; only when both schemas have as many columns (positions then pair them)."""
    if len(cols.old) != len(cols.new):
        return []
    return [
        _Rename(a, b)
        for a, b in zip(cols.old, cols.new, strict=True)
        if a.name != b.name and a.name not in cols.new_types and b.name not in cols.old_types
        and a.type == b.type
    ]


def _renamed(cols: _OutputColumns, r: _Rename) -> Change:
    was, now = f"{r.old.name} {r.old.type}", f"{r.new.name} {r.new.type}"
    return cols.change(was, now, f"output column renamed from '{was}' to '{now}'. {cols.tail}")


def _removed(cols: _OutputColumns, f: FieldSpec) -> Change:
    return cols.change(f"{f.name} {f.type}", None,
                       f"output column '{f.name} {f.type}' removed. {cols.tail}")


def _added(cols: _OutputColumns, f: FieldSpec) -> Change:
    return cols.change(None, f"{f.name} {f.type}", f"output column '{f.name} {f.type}' added. {cols.tail}")


def _retyped(cols: _OutputColumns, f: FieldSpec) -> Change:
    was, now = f"{f.name} {cols.old_types[f.name]}", f"{f.name} {f.type}"
    return cols.change(was, now, f"output column {fmt(f.name)} retyped from '{was}' to '{now}'. {cols.tail}")


def _redefined(cols: _OutputColumns, name: str) -> Change:
    """Column ``name`` computes something else: its values moved from another column (a schema
    change for consumers), or it is computed differently (a change of the data)."""
    was, now = cols.old_shown[name], cols.new_shown[name]
    if was == now:  # the same text: a type changed under it
        was, now = plain(cols.old_defs[name]), plain(cols.new_defs[name])
    moved = [n for n, d in cols.old_defs.items() if n != name and d == cols.new_defs[name]]
    category: Category
    if moved:
        what = (
            f"now holds {fmt(now)}, which was output as {fmt(moved[0])} before (it held {fmt(was)}): "
            f"the values moved to other column names. {cols.tail}"
        )
        category = "schema-evolution"
    else:
        what = (
            f"is now computed as {fmt(now)} (was {fmt(was)}); consumers of topic {fmt(cols.topic)} see "
            f"the new values from the next record on. {IN_PLACE_ROWS} (Operator state that depends "
            f"on it is reported separately.)"
        )
        category = "data-selection"
    return cols.change(was, now, f"output column {fmt(name)} {what}", f"outputSchema.{name}", category)


def _new_column(cols: _OutputColumns, f: FieldSpec, renamed: set[str]) -> Change | None:
    """The change of a column of the new output schema, if any: added, retyped or redefined."""
    if f.name not in cols.old_types:
        return None if f.name in renamed else _added(cols, f)
    if cols.old_types[f.name] != f.type:
        return _retyped(cols, f)
    if cols.redefines(f):
        return _redefined(cols, f.name)
    return None


def _reordered(cols: _OutputColumns) -> list[Change]:
    """The order of the columns that kept their name and meaning."""
    redefined = {f.name for f in cols.new if cols.redefines(f)}
    common_old = [f.name for f in cols.old if f.name in cols.new_types and f.name not in redefined]
    common_new = [f.name for f in cols.new if f.name in cols.old_types and f.name not in redefined]
    if common_old == common_new:
        return []
    return [cols.change(common_old, common_new,
                        f"output columns reordered from {fmt(common_old)} to {fmt(common_new)}. {cols.tail}",
                        "outputSchema.order")]


def _output_schema(old_plan: Plan, new_plan: Plan, olin: Lineage, nlin: Lineage) -> list[Change]:
    """Changes of the output columns: renamed, removed, then (in the new order) added, retyped or
    redefined, and last the order of the columns that kept their name and meaning."""
    cols = _OutputColumns.of(old_plan, new_plan, olin, nlin)
    renames = _renames(cols)
    renamed = {f.name for r in renames for f in (r.old, r.new)}
    out = [_renamed(cols, r) for r in renames]
    out += [_removed(cols, f) for f in cols.old if f.name not in cols.new_types and f.name not in renamed]
    out += [c for f in cols.new if (c := _new_column(cols, f, renamed)) is not None]
    return out + _reordered(cols)


def _stateful_order(old: Lineage, new: Lineage, matching: Matching) -> list[Change]:
    out: list[Change] = []
    for ostep, nstep in matching.pairs:
        if nstep.type not in STATEFUL:
            continue
        oa = sorted(
            matching.new_id(a) or f"{a} (removed)"
            for a in old.ancestors(ostep.id)
            if old.by_id[a].type in STATEFUL
        )
        na = sorted(a for a in new.ancestors(nstep.id) if new.by_id[a].type in STATEFUL)
        if oa != na:
            out.append(
                change(
                    "topology",
                    nstep.id,
                    "inputs",
                    oa,
                    na,
                    f"Step {nstep.id}: the stateful operators before it changed from {fmt(oa)} to "
                    f"{fmt(na)} (operators added, removed or reordered). {REPLACE}",
                )
            )
    return out


def _plan_changes(old: Plan, new: Plan) -> list[Change]:
    """The changes between two plans that differ: settings, added and removed steps, the fields of
    paired steps (the sink's first), the order of stateful operators, the output schema."""
    stateful = any(s.type in STATEFUL for s in [*old.steps, *new.steps])
    changes = _settings(old, new, stateful)
    olin, nlin = Lineage(old), Lineage(new)
    ctx = Ctx(old=olin, new=nlin, stateful=stateful, sink_topic=new.sink.topic)

    matching = match(old, new)
    changes += [_added_removed(step, added=False, stateful_plan=stateful) for step in matching.removed]
    changes += [_added_removed(step, added=True, stateful_plan=stateful) for step in matching.added]
    # the sink first: its changes (output mode, trigger) are listed before those of other steps
    for a, b in sorted(matching.pairs, key=lambda p: p[1].type != "kafkaSinkV1"):
        compare_step(ctx, a, b)
    changes += ctx.changes
    changes += _stateful_order(olin, nlin, matching)
    changes += _output_schema(old, new, olin, nlin)
    if not changes:
        changes.append(
            change(
                "transparent",
                "plan",
                "steps",
                old.hash,
                new.hash,
                "The plans differ only in how steps are wired, with the same operators, "
                "expressions and schemas. " + TRANSPARENT,
            )
        )
    return changes


def classify(
    old: Plan,
    new: Plan,
    policy: UpgradePolicy | None = None,
    *,
    old_spec: Mapping[str, Any] | None = None,
    new_spec: Mapping[str, Any] | None = None,
    extra: list[Change] | None = None,
) -> UpgradeDecision:
    """Classify the upgrade of a running query from plan ``old`` to plan ``new``.

    ``old_spec``/``new_spec``: the StreamingQuery specs (plain mappings, as in the manifest) the
    plans were compiled from; their fields outside the plan that change how the query runs (pod
    resources, restart nonce, sink topic settings) are compared too. Without them only the plans are.
    ``extra``: changes found outside the plan and the spec, weighed with the others (a change of
    engine, :func:`sluice.core.engine.engine_changes`).
    """
    policy = policy or UpgradePolicy()
    unsupported = _unsupported(old, new) + [c for c in extra or [] if c.category == "unsupported"]
    if unsupported:
        return _decide(unsupported, policy, old, new)
    runtime = runtime_changes(old_spec, new_spec) if old_spec is not None and new_spec is not None else []
    runtime += list(extra or [])
    if old.canonical_json() == new.canonical_json():
        return _decide(runtime, policy, old, new)

    return _decide(_plan_changes(old, new) + runtime, policy, old, new)
