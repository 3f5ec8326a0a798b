"""Readable text rendering of a plan (``sluice plan --output text``)."""

from __future__ import annotations

from sluice.core.plan.model import (
    AggregateV1,
    DeduplicateV1,
    FieldSpec,
    FilterV1,
    KafkaSinkV1,
    KafkaSourceV1,
    Plan,
    ProjectV1,
    SessionWindowAggregateV1,
    Step,
    StreamStreamJoinV1,
    WatermarkV1,
    WindowAggregateV1,
)


def _schema(fields: list[FieldSpec]) -> str:
    return ", ".join(f"{f.qualifier + '.' if f.qualifier else ''}{f.name}: {f.type}" for f in fields)


def _details(step: Step) -> list[str]:
    if isinstance(step, KafkaSourceV1):
        lines = [f"topic {step.topic} ({step.format}), starting at {step.starting_offsets}"]
        if step.max_offsets_per_trigger:
            lines.append(f"at most {step.max_offsets_per_trigger} records per trigger")
        lines.append(
            f"malformed records: {step.malformed.policy}"
            + (f" -> {step.malformed.topic}" if step.malformed.topic else "")
        )
        return lines
    if isinstance(step, WatermarkV1):
        return [f"watermark on {step.column}, delay {step.delay}"]
    if isinstance(step, FilterV1):
        return [f"where {step.condition}"]
    if isinstance(step, ProjectV1):
        return [f"{e.name} = {e.expr}" for e in step.expressions]
    if isinstance(step, AggregateV1 | WindowAggregateV1 | SessionWindowAggregateV1):
        lines = []
        if isinstance(step, WindowAggregateV1):
            slide = f" sliding every {step.window.slide}" if step.window.slide else ""
            lines.append(
                f"{step.window.name} = window over {step.window.column}, size {step.window.size}{slide}"
            )
        if isinstance(step, SessionWindowAggregateV1):
            lines.append(
                f"{step.session.name} = session window over {step.session.column}, gap {step.session.gap}"
            )
        lines += [f"key {k.name} = {k.expr}" for k in step.keys]
        lines += [f"{a.name} = {a.expr}" for a in step.aggregates]
        return lines
    if isinstance(step, StreamStreamJoinV1):
        lines = [f"{step.join_type} join {step.left_alias} with {step.right_alias}"]
        lines += [f"key {k.left} = {k.right}" for k in step.keys]
        if step.time_condition:
            lines.append(f"time range {step.time_condition}")
        return lines
    if isinstance(step, DeduplicateV1):
        return ["distinct on " + ", ".join(step.columns)]
    if isinstance(step, KafkaSinkV1):
        lines = [f"topic {step.topic} ({step.format}), outputMode {step.output_mode}, {step.delivery}"]
        if step.key:
            lines.append("key " + ", ".join(step.key))
        if step.trigger.processing_time:
            lines.append(f"trigger every {step.trigger.processing_time}")
        return lines
    return []


def render_text(plan: Plan) -> str:
    """The plan as a tree, from the sink down to the sources."""
    by_id = {s.id: s for s in plan.steps}
    out = [
        f"plan v{plan.version} for Spark {plan.spark_version}  hash {plan.hash[:16]}",
        f"settings: shuffle partitions {plan.settings.shuffle_partitions}, state store "
        f"{plan.settings.state_store_provider.rsplit('.', 1)[-1]}, changelog checkpointing "
        f"{'on' if plan.settings.changelog_checkpointing else 'off'}, state format "
        f"{plan.settings.state_format}",
        "output: " + _schema(plan.output_schema),
        "",
    ]

    def walk(step_id: str, prefix: str, last: bool, root: bool) -> None:
        step = by_id[step_id]
        branch = "" if root else ("└─ " if last else "├─ ")
        out.append(f"{prefix}{branch}{step.type} [{step.id}]")
        child_prefix = prefix if root else prefix + ("   " if last else "│  ")
        for line in _details(step):
            out.append(f"{child_prefix}{'│  ' if step.inputs else '   '}{line}")
        for i, input_id in enumerate(step.inputs):
            walk(input_id, child_prefix, i == len(step.inputs) - 1, False)

    walk(plan.sink.id, "", True, True)
    return "\n".join(out) + "\n"
