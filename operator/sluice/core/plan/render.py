"""Readable text rendering of a plan (``sluice plan --output text``)."""

from __future__ import annotations

from sluice.core.plan.model import FieldSpec, Plan, Step
from sluice.core.plan.steptypes import descriptor


def _schema(fields: list[FieldSpec]) -> str:
    return ", ".join(f"{f.qualifier + '.' if f.qualifier else ''}{f.name}: {f.type}" for f in fields)


def _details(step: Step) -> list[str]:
    found = descriptor(step.type)
    return found.details(step) if found is not None else []


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
