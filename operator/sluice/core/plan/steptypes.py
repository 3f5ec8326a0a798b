"""What each plan step type is, in one place: one descriptor per type, looked up by the step's
``type`` (the way the runtime looks up its builders in ``sluice_runtime.steps.REGISTRY``).

A descriptor says whether the step keeps state, which operators Spark records for it in a
checkpoint, what its state means (its part of the state signature the checkpoint backstop records
and compares, ``sluice.core.classify.backstop``), how the lineage reads a column through it,
whether steps are paired by their place in the plan, what a new checkpoint costs its results, and
how ``sluice plan -o text`` shows it. Two
more parts live in the layers that act on plans, keyed by the same type: the classifier's rule
(``sluice.core.classify.steps.RULES``) and the runtime's builder (``sluice_runtime.steps.REGISTRY``).
``tests/unit/core/plan/test_step_types.py`` derives the list of types from the plan model's ``Step`` union
and fails, naming the missing piece, when a type lacks any part (descriptor, compiler, classifier
rule, runtime builder, historical plan, corpus case).

To add a step type: its model in ``plan/model.py`` (and the ``Step`` union), a descriptor here, the
compiler code that plans it, a classifier rule, a runtime builder, a historical plan and a corpus
case.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from sluice.core.plan.model import (
    AggregateV1,
    DeduplicateV1,
    FieldSpec,
    FilterV1,
    KafkaSinkV1,
    KafkaSourceV1,
    ProjectV1,
    SessionWindowAggregateV1,
    Step,
    StepBase,
    StreamStreamJoinV1,
    UnionV1,
    WatermarkV1,
    WindowAggregateV1,
)

#: How the lineage (``sluice.core.classify.lineage``) reads a column of the step's output:
#: ``source`` (a leaf: the source's own column), ``project`` (the expression that defines it),
#: ``aggregate`` (the key, aggregate or window it computes), ``join`` (the side it comes from),
#: ``union`` (all branches), ``pass-through`` (the same column of its input), ``leaf`` (a column of
#: the step's own output, compared on its own)
LineageRole = Literal["source", "project", "aggregate", "join", "union", "pass-through", "leaf"]


class Expansions(Protocol):
    """What a step's state signature is computed with: the plan's lineage
    (``sluice.core.classify.lineage.Lineage``), expressions expanded down to typed source columns."""

    @property
    def by_id(self) -> Mapping[str, StepBase]: ...

    def expand(self, expr: str, step_ids: list[str], depth: int = 0) -> str: ...

    def column(self, name: str, qualifier: str | None, step_ids: list[str], depth: int) -> str: ...


#: ``state(step, expansions)``: what the state of a stateful step means, as JSON-able data
StateSignature = Callable[[Any, Expansions], dict[str, Any]]


@dataclass(frozen=True)
class StepType:
    name: str
    model: type[StepBase]
    stateful: bool
    lineage: LineageRole
    #: ``details(step)``: the lines ``sluice plan -o text`` shows under the step
    details: Callable[[Any], list[str]]
    #: operator names Spark records in ``state/<op>/_metadata/metadata`` (stateful types)
    spark_operators: frozenset[str] = frozenset()
    #: what a new checkpoint (a replace) costs the results of a query with this step
    reset_note: str | None = None
    #: the classifier pairs steps of this type by their place among the anchors (stateful
    #: operators, unions, the sink), the others by type along the way (``classify.match``)
    anchor: bool = False
    #: ``state(step, expansions)``: the step's part of the state signature (stateful types): every
    #: parameter its state depends on, expressions expanded to typed source columns; a checkpoint
    #: whose recorded part differs is refused (``sluice.core.classify.backstop``)
    state: StateSignature | None = None


def _source(step: KafkaSourceV1) -> list[str]:
    lines = [f"topic {step.topic} ({step.format}), starting at {step.starting_offsets}"]
    if step.max_offsets_per_trigger:
        lines.append(f"at most {step.max_offsets_per_trigger} records per trigger")
    if step.min_partitions:
        lines.append(f"at least {step.min_partitions} tasks per batch")
    lines.append(f"malformed records: {step.malformed.policy}"
                 + (f" -> {step.malformed.topic}" if step.malformed.topic else ""))
    if step.on_data_loss is not None:
        lines.append(f"on data loss: {step.on_data_loss}")
    if step.isolation_level is not None:
        lines.append(f"isolation level: {step.isolation_level}")
    return lines


def _aggregates(step: AggregateV1 | WindowAggregateV1 | SessionWindowAggregateV1) -> list[str]:
    lines = []
    if isinstance(step, WindowAggregateV1):
        slide = f" sliding every {step.window.slide}" if step.window.slide else ""
        window = step.window
        lines.append(f"{window.name} = window over {window.column}, size {window.size}{slide}")
    if isinstance(step, SessionWindowAggregateV1):
        session = step.session
        lines.append(f"{session.name} = session window over {session.column}, gap {session.gap}")
    lines += [f"key {k.name} = {k.expr}" for k in step.keys]
    lines += [f"{a.name} = {a.expr}" for a in step.aggregates]
    return lines


def _join(step: StreamStreamJoinV1) -> list[str]:
    lines = [f"{step.join_type} join {step.left_alias} with {step.right_alias}"]
    lines += [f"key {k.left} = {k.right}" for k in step.keys]
    if step.time_condition:
        lines.append(f"time range {step.time_condition}")
    return lines


def _expanded(lin: Expansions, step: StepBase, exprs: list[str]) -> list[str]:
    return [lin.expand(e, list(step.inputs)) if e != "*" else "*" for e in exprs]


def _aggregate_state(
    step: AggregateV1 | WindowAggregateV1 | SessionWindowAggregateV1, lin: Expansions
) -> dict[str, Any]:
    state: dict[str, Any] = {
        "keys": _expanded(lin, step, [k.expr for k in step.keys]),
        "aggregates": [[a.function, _expanded(lin, step, a.args)] for a in step.aggregates],
    }
    if isinstance(step, WindowAggregateV1):
        w = step.window
        state["window"] = [lin.expand(w.column, list(step.inputs)), w.size, w.slide]
    if isinstance(step, SessionWindowAggregateV1):
        s = step.session
        state["session"] = [lin.expand(s.column, list(step.inputs)), s.gap]
    state["types"] = [f.type for f in step.schema_]
    return state


def _join_state(step: StreamStreamJoinV1, lin: Expansions) -> dict[str, Any]:
    over = [step.id]  # the keys' qualified columns, resolved on the join's own sides
    tc = step.time_condition

    def schema(fields: list[FieldSpec]) -> list[str]:
        return [f"{f.name} {f.type}" for f in fields]

    return {
        "joinType": step.join_type,
        "keys": [[lin.expand(k.left, over), lin.expand(k.right, over)] for k in step.keys],
        "timeCondition": lin.expand(tc, over) if tc else None,
        "inputs": [schema(lin.by_id[i].schema_) for i in step.inputs if i in lin.by_id],
    }


def _dedup_state(step: DeduplicateV1, lin: Expansions) -> dict[str, Any]:
    return {"columns": [lin.column(c, None, list(step.inputs), 0) for c in step.columns]}


def _sink(step: KafkaSinkV1) -> list[str]:
    lines = [f"topic {step.topic} ({step.format}), outputMode {step.output_mode}, {step.delivery}"]
    if step.key:
        lines.append("key " + ", ".join(step.key))
    if step.trigger.processing_time:
        lines.append(f"trigger every {step.trigger.processing_time}")
    return lines


_WINDOW_RESET = "counts and aggregates restart from zero for the windows open at the switch"

TYPES: tuple[StepType, ...] = (
    StepType("kafkaSourceV1", KafkaSourceV1, False, "source", _source),
    StepType("watermarkV1", WatermarkV1, False, "pass-through",
             lambda s: [f"watermark on {s.column}, delay {s.delay}"]),
    StepType("filterV1", FilterV1, False, "pass-through", lambda s: [f"where {s.condition}"]),
    StepType("projectV1", ProjectV1, False, "project",
             lambda s: [f"{e.name} = {e.expr}" for e in s.expressions]),
    StepType("windowAggregateV1", WindowAggregateV1, True, "aggregate", _aggregates,
             frozenset({"stateStoreSave"}), _WINDOW_RESET, anchor=True, state=_aggregate_state),
    StepType("sessionWindowAggregateV1", SessionWindowAggregateV1, True, "aggregate", _aggregates,
             frozenset({"sessionWindowStateStoreSaveExec", "sessionWindowStateStoreSave"}), _WINDOW_RESET,
             anchor=True, state=_aggregate_state),
    StepType("aggregateV1", AggregateV1, True, "aggregate", _aggregates, frozenset({"stateStoreSave"}),
             "running aggregates restart from zero", anchor=True, state=_aggregate_state),
    StepType("streamStreamJoinV1", StreamStreamJoinV1, True, "join", _join,
             frozenset({"symmetricHashJoin"}),
             "join buffers start empty: records from before the switch find no match after it", anchor=True,
             state=_join_state),
    StepType("unionV1", UnionV1, False, "union", lambda s: [], anchor=True),
    StepType("deduplicateV1", DeduplicateV1, True, "pass-through",
             lambda s: ["distinct on " + ", ".join(s.columns)],
             frozenset({"dedupe", "dedupeWithinWatermark"}),
             "deduplication forgets the keys seen before the switch", anchor=True, state=_dedup_state),
    StepType("kafkaSinkV1", KafkaSinkV1, False, "leaf", _sink, anchor=True),
)

REGISTRY: dict[str, StepType] = {t.name: t for t in TYPES}
STATEFUL: frozenset[str] = frozenset(t.name for t in TYPES if t.stateful)
ANCHORS: frozenset[str] = frozenset(t.name for t in TYPES if t.anchor)


def model_types() -> dict[str, type[StepBase]]:
    """Every step type of the plan model's ``Step`` union, by name (what the registry must cover)."""
    union = typing.get_args(typing.get_args(Step)[0])
    return {model.model_fields["type"].default: model for model in union}


def descriptor(step_type: str) -> StepType | None:
    return REGISTRY.get(step_type)


def reset_notes(step_types: set[str]) -> list[str]:
    """What a new checkpoint costs a plan with these step types, once per distinct note."""
    notes: list[str] = []
    for t in TYPES:
        if t.name in step_types and t.reset_note and t.reset_note not in notes:
            notes.append(t.reset_note)
    return notes
