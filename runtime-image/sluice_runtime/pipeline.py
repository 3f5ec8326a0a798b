"""Build the streaming pipeline of a plan from its steps alone (the SQL text is never read).

Every write goes through ``foreachBatch`` and the pipeline's :class:`~sluice_runtime.drain.BatchGate`
so that a drain can finish the batch in flight and stop before the next one writes:

* ``atLeastOnce``: each batch is written with Spark's Kafka sink (``df.write.format("kafka")``);
* ``exactlyOnce``: each batch is written in one Kafka transaction
  (:mod:`sluice_runtime.sink_exactly_once`).

Sources whose malformed policy is ``deadLetter`` send their malformed records to the dead-letter
topic **with the batch that read them**, written by the main query's sink
(:mod:`sluice_runtime.main_output`: one read and one parse of a stateless plan's batch; the union
of output and dead letters in the streaming query otherwise).

A checkpoint an older runtime started keeps its dead-letter queries of its own (offsets under
``<checkpoint>/dlq/<source id>``, :func:`separate_dead_letters`): their offsets lag the main
query's, and moving the dead letters into the main query there would skip what lies between.
Such a query triggers every :data:`DEAD_LETTER_INTERVAL` at most (the sink's trigger when that is
longer); each of its batches reads the source again.

A version that writes a topic other than its plan's sink topic (a backfill's, ``SLUICE_OUTPUT_TOPIC``)
runs its plan with the sink topic substituted (:func:`with_output_topic`): everything derived from
the sink topic follows it (the topic ensured, the exactly-once transactions and marker, the default
dead-letter topic ``<output topic>.dlq``, also where the compiler wrote ``<sink topic>.dlq`` into
the plan), the plan's hash does not.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.core.compiler.intervals import interval_millis
from sluice.core.plan.model import KafkaSinkV1, KafkaSourceV1, Plan
from sluice.core.versions import dead_letter_topic

from sluice_runtime import avro as avro_mod
from sluice_runtime import kafka_admin
from sluice_runtime.avro import AvroSettings
from sluice_runtime.drain import BatchGate, Drainable, last_offsets
from sluice_runtime.eos_tasks import TaskSink
from sluice_runtime.frames import build_frames, query_name
from sluice_runtime.kafka_security import KafkaSecurity
from sluice_runtime.main_output import main_output
from sluice_runtime.sink_exactly_once import TransactionalSink, is_routed
from sluice_runtime.steps import BuildContext
from sluice_runtime.steps.base import DeadLetterRoute

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


@dataclass
class Pipeline:
    plan: Plan
    query_id: str
    checkpoint: str
    main: StreamingQuery
    gate: BatchGate
    dead_letter: dict[str, StreamingQuery] = field(default_factory=dict)
    dead_letter_checkpoints: dict[str, str] = field(default_factory=dict)
    eos_sink: TransactionalSink | TaskSink | None = None
    observations: dict[str, str] = field(default_factory=dict)
    #: dead-letter queries not started yet (``start_pipeline(defer_dead_letters=True)``)
    deferred: list[Callable[[], Any]] = field(default_factory=list)
    #: why starting them failed (the term then ends as failed)
    failure: BaseException | None = None
    #: the registry settings and writer schemas the pipeline was built with
    avro: AvroSettings = field(default_factory=AvroSettings)
    #: topic -> how many times the main query scans it per batch (more than once: a source whose
    #: dead letters go with the batch, :func:`sluice_runtime.main_output.source_scans`)
    scans: dict[str, int] = field(default_factory=dict)

    def start_deferred(self) -> None:
        """Start the dead-letter queries held back; a failure is kept in :attr:`failure`."""
        pending, self.deferred = self.deferred, []
        try:
            for start in pending:
                start()
            log.info("dead-letter queries started (%s)", len(pending))
        except Exception as exc:
            log.error("starting the dead-letter queries failed: %s", exc)
            self.failure = exc

    @property
    def main_name(self) -> str:
        return str(self.main.name)

    def queries(self) -> list[Drainable]:
        out = [Drainable(self.main_name, self.main, self.checkpoint)]
        for source_id, q in self.dead_letter.items():
            out.append(Drainable(str(q.name), q, self.dead_letter_checkpoints[source_id]))
        return out

    def all_queries(self) -> list[StreamingQuery]:
        return [self.main, *self.dead_letter.values()]


def with_output_topic(plan: Plan, topic: str) -> Plan:
    """``plan`` with its sink writing ``topic``, keeping the pinned plan's hash (the content hash
    of the plan as pinned: the Lease, the checkpoint's signature and the health gate name the plan
    by it, whichever topic this version writes).

    A source's dead-letter topic that is the sink topic's default (``<sink topic>.dlq``: what the
    compiler writes into the plan when the spec names none) becomes ``<topic>.dlq``; one the spec
    named otherwise stays (a source without one gets ``<topic>.dlq`` when it is built)."""
    plan_hash = plan.hash or plan.compute_hash()
    sink = plan.sink
    steps: list[Any] = []
    for step in plan.steps:
        if step is sink:
            step = step.model_copy(update={"topic": topic})
        elif isinstance(step, KafkaSourceV1) and step.malformed.topic:
            moved = dead_letter_topic(step.malformed.topic, sink.topic, topic)
            step = step.model_copy(update={"malformed": step.malformed.model_copy(update={"topic": moved})})
        steps.append(step)
    return plan.model_copy(update={"steps": steps, "hash": plan_hash})


def dead_letter_checkpoint(checkpoint: str, source_id: str) -> str:
    """Where a dead-letter query of its own keeps its offsets (:func:`separate_dead_letters`)."""
    return f"{checkpoint.rstrip('/')}/dlq/{source_id}"


def separate_dead_letters(checkpoint: str, routes: list[DeadLetterRoute]) -> bool:
    """Whether the dead letters keep queries of their own on ``checkpoint``: an older runtime
    started one there (it has offsets)."""
    return any(last_offsets(dead_letter_checkpoint(checkpoint, r.source_id)) is not None for r in routes)


def _trigger(writer: Any, processing_time: str | None, available_now: bool) -> Any:
    if available_now:
        return writer.trigger(availableNow=True)
    if processing_time:
        return writer.trigger(processingTime=processing_time)
    return writer


#: a dead-letter query's shortest trigger interval (a query of its own, on a checkpoint an older
#: runtime started: :func:`separate_dead_letters`). Dead letters are for people and alerts, not for a
#: consumer waiting downstream, and a dead-letter batch costs about what a main batch costs (it reads
#: the source again, plans, commits): at the main query's second it was a third of an idle driver's
#: CPU (``bench/bench_steady.py``); at ten seconds it is lost in that benchmark's noise
DEAD_LETTER_INTERVAL = "10 seconds"


def dead_letter_interval(sink: KafkaSinkV1) -> str:
    """The dead-letter queries' ``processingTime``: the sink's trigger interval when it is at least
    :data:`DEAD_LETTER_INTERVAL`, else that."""
    main = sink.trigger.processing_time
    if main and interval_millis(main) >= interval_millis(DEAD_LETTER_INTERVAL):
        return main
    return DEAD_LETTER_INTERVAL


@dataclass
class Prepared:
    """A plan's DataFrames, built and analysed, ready to start on a checkpoint (a warm standby
    holds one of these: nothing in it has touched a checkpoint or fenced a producer)."""

    plan: Plan
    ctx: BuildContext
    frames: dict[str, DataFrame]
    query_id: str


#: how a standby warms up before it waits: ``none`` (DataFrames analysed), ``generic`` (plus a
#: small batch job), ``plan`` (plus the plan itself over the tail of its sources, see
#: :mod:`sluice_runtime.warmup`)
WARM_UP_MODES = ("none", "generic", "plan")


def prepare_pipeline(
    spark: SparkSession,
    plan: Plan,
    *,
    bootstrap: str,
    query_id: str,
    security: KafkaSecurity | None = None,
    consumer_group: str | None = None,
    warm_up: str = "none",
    start_from: str | None = None,
    checkpoint: str | None = None,
    avro: AvroSettings | None = None,
) -> Prepared:
    """Build every step's DataFrame (Spark analyses each as it is built) and make sure the sink
    and dead-letter topics exist; then warm up as ``warm_up`` says (:data:`WARM_UP_MODES`), so
    that the first micro-batch after a takeover finds the JVM warm. ``start_from``: where the
    sources start on an empty checkpoint instead of the plan's ``startingOffsets`` (the warm-up
    reads its own offsets whatever it is). ``avro``: the schema registry and the avro sink's schema
    id (:mod:`sluice_runtime.avro`); the writer schemas of avro sources are fetched here."""
    if warm_up not in WARM_UP_MODES:
        raise ValueError(f"warm_up: {warm_up!r} is not one of {', '.join(WARM_UP_MODES)}")
    ctx = BuildContext(
        spark=spark, plan=plan, bootstrap=bootstrap, query_id=query_id, security=security or KafkaSecurity(),
        consumer_group=consumer_group, start_from=start_from, avro=avro or AvroSettings(),
    )
    frames = build_frames(plan, ctx)
    kafka_admin.ensure_topics(
        bootstrap, [plan.sink.topic, *(r.topic for r in ctx.dead_letters)], security=ctx.security
    )
    if warm_up != "none":
        frames[plan.sink.id].schema  # noqa: B018 (analysis of the whole DAG)
    if warm_up == "generic":
        warm = spark.range(0, 20000, numPartitions=2)
        warm.selectExpr("id % 97 AS k", "to_json(named_struct('v', id)) AS j").groupBy("k").count().collect()
    elif warm_up == "plan":
        from sluice_runtime.warmup import warm_up_plan

        log.info("warm-up on the plan: %.1fs", warm_up_plan(ctx, checkpoint=checkpoint))
    return Prepared(plan=plan, ctx=ctx, frames=frames, query_id=query_id)


def with_start_offsets(prepared: Prepared, offsets: dict[str, str],
                       start_from: str | None = None) -> Prepared:
    """The prepared pipeline with its sources starting at ``offsets`` (topic -> ``startingOffsets``
    JSON), the others at ``start_from`` (``earliest`` or an RFC 3339 time, see
    :func:`sluice_runtime.config.start_from_options`) when given: the DataFrames are built again
    (Spark reads these options when a query starts on an empty checkpoint, and only then)."""
    ctx = dataclasses.replace(prepared.ctx, start_offsets=dict(offsets), start_from=start_from,
                              dead_letters=[], observations={}, tagged={})
    return Prepared(plan=prepared.plan, ctx=ctx, frames=build_frames(prepared.plan, ctx),
                    query_id=prepared.query_id)


def with_new_writer_schemas(prepared: Prepared) -> Prepared | None:
    """The prepared pipeline built again when the subject of an avro source has gained schema ids
    since it was built (:func:`sluice_runtime.avro.refetched`); None when none has. A driver taking
    over calls it, so a record written with a newer writer schema is read without a restart."""
    fresh = avro_mod.refetched(prepared.ctx.avro, prepared.plan)
    if fresh is None:
        return None
    log.info("avro: the source subjects have new schema ids; the pipeline is built again")
    ctx = dataclasses.replace(prepared.ctx, avro=fresh, dead_letters=[], observations={}, tagged={})
    return Prepared(plan=prepared.plan, ctx=ctx, frames=build_frames(prepared.plan, ctx),
                    query_id=prepared.query_id)


def failed_on_new_schema_id(pipeline: Pipeline) -> bool:
    """Whether ``pipeline`` failed on a schema id its avro source's subject did not have at build."""
    failure = pipeline.failure
    for q in pipeline.all_queries():
        try:
            failure = failure or q.exception()
        except Exception:  # a query Spark no longer knows
            continue
    return avro_mod.is_unknown_schema_id(failure)


def renewed_avro(pipeline: Pipeline) -> AvroSettings | None:
    """After :func:`failed_on_new_schema_id`: the settings with the subjects fetched anew, when they
    have new ids now (the caller builds and starts the pipeline again on the same checkpoint)."""
    if not failed_on_new_schema_id(pipeline):
        return None
    return avro_mod.refetched(pipeline.avro, pipeline.plan)


def renewed_after_failure(prepared: Prepared, pipeline: Pipeline) -> Prepared | None:
    """The same for a prepared pipeline: built again with the subjects fetched anew, or None."""
    return with_new_writer_schemas(prepared) if failed_on_new_schema_id(pipeline) else None


def build_pipeline(
    spark: SparkSession,
    plan: Plan,
    *,
    checkpoint: str,
    bootstrap: str,
    query_id: str,
    available_now: bool = False,
    security: KafkaSecurity | None = None,
    consumer_group: str | None = None,
    transactional_id: str | None = None,
    gate: BatchGate | None = None,
    start_from: str | None = None,
    avro: AvroSettings | None = None,
    eos_writers: str = "driver",
) -> Pipeline:
    """Start the plan's queries. ``security`` applies to every Kafka client (Spark's source and
    sink, the exactly-once producer, the admin client); ``consumer_group`` and
    ``transactional_id`` are the ids the operator assigned (derived from ``query_id`` if absent);
    ``start_from`` starts every source there when ``checkpoint`` holds no offsets yet; ``avro``: see
    :func:`prepare_pipeline`."""
    fresh = last_offsets(checkpoint) is None
    prepared = prepare_pipeline(spark, plan, bootstrap=bootstrap, query_id=query_id, security=security,
                                consumer_group=consumer_group, start_from=start_from if fresh else None,
                                avro=avro)
    return start_pipeline(prepared, checkpoint=checkpoint, available_now=available_now,
                          transactional_id=transactional_id, gate=gate, eos_writers=eos_writers)


def start_pipeline(
    prepared: Prepared,
    *,
    checkpoint: str,
    available_now: bool = False,
    transactional_id: str | None = None,
    gate: BatchGate | None = None,
    defer_dead_letters: bool = False,
    eos_writers: str = "driver",
) -> Pipeline:
    """Start a prepared pipeline on ``checkpoint``. The exactly-once producer is initialised while
    the queries start (that fences every older driver of the same transactional id), and before
    the first write (``eos_writers``: who writes exactly-once output, see
    :attr:`sluice_runtime.config.RunConfig.eos_writers`). ``defer_dead_letters``: on a checkpoint
    with dead-letter queries of their own (:func:`separate_dead_letters`), start the main query
    only; those start with :meth:`Pipeline.start_deferred` (a takeover's first batch then has the
    CPU to itself: they resume from their own checkpoints a moment later)."""
    plan, ctx, frames, query_id = prepared.plan, prepared.ctx, prepared.frames, prepared.query_id
    bootstrap, security, consumer_group = ctx.bootstrap, ctx.security, ctx.consumer_group
    sink = plan.sink
    gate = gate or BatchGate()
    kafka_opts = ctx.sink_options()

    def alo_writer(topic: str) -> Any:
        def write(frame: DataFrame, batch_id: int) -> None:
            del batch_id
            writer = frame.write.format("kafka").options(**kafka_opts)
            if not is_routed(frame):  # else each row names its own
                writer = writer.option("topic", topic)
            writer.save()

        return write

    eos: TransactionalSink | TaskSink | None = None
    if sink.delivery == "exactlyOnce":
        eos = (TaskSink if eos_writers == "tasks" else TransactionalSink)(
            bootstrap=bootstrap, topic=sink.topic, query_id=query_id, checkpoint=checkpoint,
            security=security, transactional_id=transactional_id, consumer_group=consumer_group,
        )
        eos.start()  # fences older drivers of this query identity (before the first write)
        write_main = eos.write_batch
    else:
        write_main = alo_writer(sink.topic)

    dead_letter: dict[str, StreamingQuery] = {}
    dlq_checkpoints: dict[str, str] = {}

    separate = separate_dead_letters(checkpoint, ctx.dead_letters)
    routes = [] if separate else list(ctx.dead_letters)
    output = main_output(plan, ctx, frames, routes)

    def write(frame: DataFrame, batch_id: int) -> Any:
        def to_sink(built: DataFrame, partitions: int | None) -> Any:
            if isinstance(eos, TaskSink):
                return eos.write_batch(built, batch_id, partitions=partitions)
            return write_main(built, batch_id)

        return output.write(frame, to_sink)

    def start_dead_letter(route: Any) -> StreamingQuery:
        name = query_name(query_id, f"-dlq-{route.source_id}")
        dlq_ckpt = dead_letter_checkpoint(checkpoint, route.source_id)
        dlq_write = alo_writer(route.topic)

        def dlq_batch(frame: DataFrame, batch_id: int) -> None:
            gate.run(name, batch_id, lambda: dlq_write(frame, batch_id))

        w = route.frame.writeStream.queryName(name).option("checkpointLocation", dlq_ckpt)
        q = _trigger(w.foreachBatch(dlq_batch), dead_letter_interval(sink), available_now).start()
        dead_letter[route.source_id] = q
        dlq_checkpoints[route.source_id] = dlq_ckpt
        return q

    started: list[StreamingQuery] = []
    try:
        if separate and not defer_dead_letters:
            for route in ctx.dead_letters:
                started.append(start_dead_letter(route))

        main_name = query_name(query_id)

        def main_batch(frame: DataFrame, batch_id: int) -> None:
            gate.run(main_name, batch_id, lambda: write(frame, batch_id))

        writer = (
            output.frame
            .writeStream.queryName(main_name)
            .outputMode(sink.output_mode)
            .option("checkpointLocation", checkpoint)
            .foreachBatch(main_batch)
        )
        main = _trigger(writer, sink.trigger.processing_time, available_now).start()
    except Exception:
        for q in started:
            q.stop()
        if eos is not None:
            eos.close()
        raise
    pipeline = Pipeline(
        plan=plan,
        query_id=query_id,
        checkpoint=checkpoint,
        main=main,
        gate=gate,
        dead_letter=dead_letter,
        dead_letter_checkpoints=dlq_checkpoints,
        eos_sink=eos,
        observations=dict(ctx.observations),
        avro=ctx.avro,
        scans=output.scans,
    )
    if separate and defer_dead_letters:
        pipeline.deferred = [functools.partial(start_dead_letter, route) for route in ctx.dead_letters]
    return pipeline


def build_query(
    spark: SparkSession,
    plan: Plan,
    *,
    checkpoint: str,
    bootstrap: str,
    query_id: str,
    available_now: bool = False,
    security: KafkaSecurity | None = None,
) -> StreamingQuery:
    """Start the plan's pipeline; return its main query (which writes the dead letters too, but on
    a checkpoint with dead-letter queries of their own, :func:`separate_dead_letters`)."""
    return build_pipeline(
        spark,
        plan,
        checkpoint=checkpoint,
        bootstrap=bootstrap,
        query_id=query_id,
        available_now=available_now,
        security=security,
    ).main
