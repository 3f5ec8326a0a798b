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
- trigger interval, rate limit, starting offsets, delivery -> ``transparent`` -> ``in-place``.
The most severe category decides; ``replace`` becomes ``reject`` when the policy forbids it.
"""

from __future__ import annotations

from typing import Any

from sluice.core.classify.lineage import Lineage
from sluice.core.classify.model import DECISION_FOR, SEVERITY, Category, Change, UpgradeDecision, severity
from sluice.core.classify.steps import KNOWN_STEP_TYPES, REPLACE, TRANSPARENT, Ctx, compare_step, fmt
from sluice.core.plan.model import PLAN_FORMAT_VERSION, STATEFUL_STEP_TYPES, FieldSpec, Plan
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
            "the new query starts reading where the old one stopped (handOff)"
            if policy.replace_strategy == "handOff"
            else "the new query re-reads its sources from the earliest offsets (backfill)"
        )
        reasons.append(f"The query is replaced by one with a new checkpoint: {how}.")
    elif decision == "none":
        reasons = ["The new plan is identical to the running plan (same hash): nothing to do."]
    return UpgradeDecision(
        category=category,
        decision=decision,
        reasons=reasons,
        changes=changes,
        old_hash=old.hash or old.compute_hash(),
        new_hash=new.hash or new.compute_hash(),
    )


def _unsupported(old: Plan, new: Plan) -> list[Change]:
    out: list[Change] = []
    if new.version < old.version:
        out.append(
            Change(
                category="unsupported",
                step="plan",
                field="version",
                old=old.version,
                new=new.version,
                message=f"Plan format version would go down from {old.version} to {new.version}; "
                f"a checkpoint written by a newer plan format cannot be continued by an "
                f"older one. Recompile the query with the current compiler.",
            )
        )
    if new.version > PLAN_FORMAT_VERSION:
        out.append(
            Change(
                category="unsupported",
                step="plan",
                field="version",
                old=old.version,
                new=new.version,
                message=f"Plan format version {new.version} is newer than this classifier "
                f"understands ({PLAN_FORMAT_VERSION}); upgrade the operator first.",
            )
        )
    for label, plan in (("old", old), ("new", new)):
        for step in plan.steps:
            step_type = getattr(step, "type", None)
            if step_type not in KNOWN_STEP_TYPES:
                out.append(
                    Change(
                        category="unsupported",
                        step=getattr(step, "id", None),
                        field="type",
                        old=step_type if label == "old" else None,
                        new=step_type if label == "new" else None,
                        message=f"Step {getattr(step, 'id', '?')} of the {label} plan has step type "
                        f"{fmt(step_type)}, which this classifier does not know; "
                        f"upgrade the operator first.",
                    )
                )
    return out


def _settings(old: Plan, new: Plan) -> list[Change]:
    out: list[Change] = []
    od, nd = old.settings.model_dump(mode="json"), new.settings.model_dump(mode="json")
    for key in sorted(set(od) | set(nd)):
        if od.get(key) != nd.get(key):
            name = _SETTING_NAMES.get(key, key)
            out.append(
                Change(
                    category="topology",
                    step="settings",
                    field=key,
                    old=od.get(key),
                    new=nd.get(key),
                    message=f"Pinned setting {name} changed from {fmt(od.get(key))} to "
                    f"{fmt(nd.get(key))}. The checkpoint pins it: Spark restores the old "
                    f"value and silently ignores the new one (state is partitioned by it). "
                    f"The query needs a new checkpoint (replace).",
                )
            )
    if old.spark_version != new.spark_version:
        out.append(
            Change(
                category="topology",
                step="plan",
                field="sparkVersion",
                old=old.spark_version,
                new=new.spark_version,
                message=f"The plan's Spark version changed from {fmt(old.spark_version)} to "
                f"{fmt(new.spark_version)}; Sluice does not continue a checkpoint across "
                f"engine versions. {REPLACE}",
            )
        )
    return out


def _added_removed(step: Any, added: bool, stateful_plan: bool) -> Change:
    verb = "added" if added else "removed"
    st = step.type
    desc = f"Step {step.id} ({st}) was {verb}"
    old, new = (None, st) if added else (st, None)
    if st in STATEFUL_STEP_TYPES:
        return Change(
            category="topology",
            step=step.id,
            field="steps",
            old=old,
            new=new,
            message=f"{desc}: the set of stateful operators changes and the checkpoint's state "
            f"operators no longer match the plan. {REPLACE}",
        )
    if st in ("kafkaSourceV1", "unionV1"):
        what = (
            f"source {fmt(getattr(step, 'source', step.id))} (topic {fmt(getattr(step, 'topic', None))})"
            if st == "kafkaSourceV1"
            else "the union of sources"
        )
        return Change(
            category="source-modifying",
            step=step.id,
            field="steps",
            old=old,
            new=new,
            message=f"{desc}: {what} {verb}. The set of sources changes, and the checkpoint's "
            f"offsets cover the old set only, so the query needs a new checkpoint (replace).",
        )
    if st == "watermarkV1":
        if stateful_plan:
            return Change(
                category="topology",
                step=step.id,
                field="steps",
                old=old,
                new=new,
                message=f"{desc}: the watermark decides when state is emitted and evicted. {REPLACE}",
            )
        return Change(
            category="transparent",
            step=step.id,
            field="steps",
            old=old,
            new=new,
            message=f"{desc}; no stateful operator uses it. {TRANSPARENT}",
        )
    if st == "kafkaSinkV1":
        return Change(
            category="topology",
            step=step.id,
            field="steps",
            old=old,
            new=new,
            message=f"{desc}: the sink changes. {REPLACE}",
        )
    return Change(
        category="data-selection",
        step=step.id,
        field="steps",
        old=old,
        new=new,
        message=f"{desc}; it does not hold state, so it only changes which records or columns are "
        f"emitted from now on. On its own this keeps state and offsets (in-place).",
    )


def _output_schema(old: list[FieldSpec], new: list[FieldSpec], sink_id: str, topic: str) -> list[Change]:
    out: list[Change] = []
    on = [f.name for f in old]
    nn = [f.name for f in new]
    ot = {f.name: f.type for f in old}
    nt = {f.name: f.type for f in new}
    tail = (
        f"Consumers of topic {fmt(topic)} see this from the next record on; the column change by "
        f"itself touches no operator state, "
        f"so on its own this keeps state and offsets (in-place)."
    )
    renamed: set[str] = set()
    if len(old) == len(new):
        for a, b in zip(old, new, strict=True):
            if a.name != b.name and a.name not in nt and b.name not in ot and a.type == b.type:
                renamed |= {a.name, b.name}
                out.append(
                    Change(
                        category="schema-evolution",
                        step=sink_id,
                        field="outputSchema",
                        old=f"{a.name} {a.type}",
                        new=f"{b.name} {b.type}",
                        message=f"Step {sink_id}: output column renamed from "
                        f"'{a.name} {a.type}' to '{b.name} {b.type}'. {tail}",
                    )
                )
    for f in old:
        if f.name not in nt and f.name not in renamed:
            out.append(
                Change(
                    category="schema-evolution",
                    step=sink_id,
                    field="outputSchema",
                    old=f"{f.name} {f.type}",
                    new=None,
                    message=f"Step {sink_id}: output column '{f.name} {f.type}' removed. {tail}",
                )
            )
    for f in new:
        if f.name not in ot and f.name not in renamed:
            out.append(
                Change(
                    category="schema-evolution",
                    step=sink_id,
                    field="outputSchema",
                    old=None,
                    new=f"{f.name} {f.type}",
                    message=f"Step {sink_id}: output column '{f.name} {f.type}' added. {tail}",
                )
            )
        elif f.name in ot and ot[f.name] != f.type:
            out.append(
                Change(
                    category="schema-evolution",
                    step=sink_id,
                    field="outputSchema",
                    old=f"{f.name} {ot[f.name]}",
                    new=f"{f.name} {f.type}",
                    message=f"Step {sink_id}: output column {fmt(f.name)} retyped from "
                    f"'{f.name} {ot[f.name]}' to '{f.name} {f.type}'. {tail}",
                )
            )
    common_old = [n for n in on if n in nt]
    common_new = [n for n in nn if n in ot]
    if common_old != common_new:
        out.append(
            Change(
                category="schema-evolution",
                step=sink_id,
                field="outputSchema.order",
                old=common_old,
                new=common_new,
                message=f"Step {sink_id}: output columns reordered from {fmt(common_old)} to "
                f"{fmt(common_new)}. {tail}",
            )
        )
    return out


def _stateful_order(old: Lineage, new: Lineage) -> list[Change]:
    out: list[Change] = []
    for sid, step in new.by_id.items():
        if step.type not in STATEFUL_STEP_TYPES or sid not in old.by_id or old.by_id[sid].type != step.type:
            continue
        oa = sorted(a for a in old.ancestors(sid) if old.by_id[a].type in STATEFUL_STEP_TYPES)
        na = sorted(a for a in new.ancestors(sid) if new.by_id[a].type in STATEFUL_STEP_TYPES)
        if oa != na:
            out.append(
                Change(
                    category="topology",
                    step=sid,
                    field="inputs",
                    old=oa,
                    new=na,
                    message=f"Step {sid}: the stateful operators before it changed from {fmt(oa)} to "
                    f"{fmt(na)} (operators added, removed or reordered). {REPLACE}",
                )
            )
    return out


def classify(old: Plan, new: Plan, policy: UpgradePolicy | None = None) -> UpgradeDecision:
    """Classify the upgrade of a running query from plan ``old`` to plan ``new``."""
    policy = policy or UpgradePolicy()
    unsupported = _unsupported(old, new)
    if unsupported:
        return _decide(unsupported, policy, old, new)
    if old.canonical_json() == new.canonical_json():
        return _decide([], policy, old, new)

    changes: list[Change] = []
    changes += _settings(old, new)
    olin, nlin = Lineage(old), Lineage(new)
    stateful = any(s.type in STATEFUL_STEP_TYPES for s in [*old.steps, *new.steps])
    ctx = Ctx(old=olin, new=nlin, stateful=stateful, sink_topic=new.sink.topic)

    osink, nsink = old.sink, new.sink
    pairs: list[tuple[Any, Any]] = [(osink, nsink)]
    for step in old.steps:
        if step is osink:
            continue
        other = nlin.by_id.get(step.id)
        if other is not None and other is not nsink and other.type == step.type:
            pairs.append((step, other))
        else:
            changes.append(_added_removed(step, added=False, stateful_plan=stateful))
    for step in new.steps:
        if step is nsink:
            continue
        other = olin.by_id.get(step.id)
        if other is None or other is osink or other.type != step.type:
            changes.append(_added_removed(step, added=True, stateful_plan=stateful))
    for a, b in pairs:
        compare_step(ctx, a, b)
    changes += ctx.changes
    changes += _stateful_order(olin, nlin)
    changes += _output_schema(list(old.output_schema), list(new.output_schema), nsink.id, nsink.topic)
    if not changes:
        changes.append(
            Change(
                category="transparent",
                step="plan",
                field="steps",
                old=old.hash,
                new=new.hash,
                message="The plans differ only in how steps are wired, with the same operators, "
                "expressions and schemas. " + TRANSPARENT,
            )
        )
    return _decide(changes, policy, old, new)
