"""The life of a driver process: supervise a running pipeline, and, with election on, wait warm
as a standby, take over, hand over.

Without a Lease (``sluice run``, tests, no ``SLUICE_LEASE_NAME``) the process runs the plan on the
checkpoint directly, as it always did. With one, every driver of a query runs :func:`run_elected`:

1. build the pipeline (DataFrames analysed, topics ensured, a small warm-up job): *standby*,
   ``/readyz`` 200 "standby: warm";
2. wait for the Lease (:class:`~sluice_runtime.elector.Elector`): released, expired, or its
   holder's process gone;
3. *active*: make the checkpoint epoch (hard links on a volume, a claim and server-side copies on
   an object store: :mod:`sluice_runtime.epochs`; a restore
   request, a backstop and the check of the checkpoint: :mod:`sluice_runtime.startpoint`),
   initialise the exactly-once producer (fences the old one), start the queries; record the
   takeover gap; report progress with the renewals (:mod:`sluice_runtime.reports`);
4. until SIGTERM (drain, release, exit 0), a hand-off request (drain, release to the requested
   pod, back to 2 still warm), a lost Lease (stop without writing, back to 2), or a failed query
   (error on the pod, release, exit 1).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.core.driverreport import DriverError
from sluice.core.election import (
    ACTIVE_DELETION_COST,
    DELETION_COST,
    LAST_TAKEOVER,
    ROLE_LABEL,
    STANDBY_DELETION_COST,
    Takeover,
    Why,
)

from sluice_runtime import avro, epochs, queryend, reports
from sluice_runtime import drain as drain_mod
from sluice_runtime.brokerlag import BrokerLag
from sluice_runtime.cleanup import CheckpointCleaner
from sluice_runtime.priority import STANDBY_NICE, own_pids, set_priority
from sluice_runtime.progress import ProgressTail
from sluice_runtime.standby_executors import HOLD, ExecutorHold, StandbyExecutors
from sluice_runtime.startpoint import StartRefused, prepare_start
from sluice_runtime.takeover import (
    DEAD_LETTER_DEFER,
    FirstBatchLog,
    GapMeter,
    exit_at_once,
    stay_out_of_the_way,
)

if TYPE_CHECKING:
    from sluice.core.plan.model import Plan

    from sluice_runtime.config import RunConfig
    from sluice_runtime.elector import Elector
    from sluice_runtime.kubeapi import KubeApi
    from sluice_runtime.pipeline import Pipeline, Prepared
    from sluice_runtime.server import RuntimeState

log = logging.getLogger("sluice_runtime")

DRAIN = "drain"
HANDOFF = "handoff"
LOST = "lost"
FAILED = queryend.FAILED
FINISHED = queryend.FINISHED


def _monitor(pipeline: Pipeline, state: RuntimeState, stop: threading.Event,
             progress: reports.TermProgress | None = None) -> None:
    """Poll the queries' progress into metrics, readiness and the term's progress record (runs in
    a thread)."""
    seen = -1
    tails: dict[int, ProgressTail] = {}
    while not stop.is_set():
        try:
            main = pipeline.main
            for q in pipeline.all_queries():
                scans = pipeline.scans if q is main else None  # a source scanned twice: its dead letters
                recent = tails.setdefault(id(q), ProgressTail(q, scans)).poll()  # new reports only
                state.metrics.observe_recent(str(q.name), recent, q.isActive)
                if progress is not None:
                    progress.observe(recent, main=q is main)
            active = main.isActive
            exc = main.exception()
            for q in pipeline.dead_letter.values():
                exc = exc or q.exception()
            state.health.active = active
            state.health.exception = str(exc.desc if hasattr(exc, "desc") else exc) if exc else None
            last = main.lastProgress
            status = main.status if active else {}
            batch = int(last["batchId"]) if last else -1
            caught_up = bool(status) and status.get("isDataAvailable") is False
            if batch > seen or (active and caught_up):
                state.health.last_progress_at = time.monotonic()
            seen = max(seen, batch)
        except Exception as exc:  # never let the monitor die
            log.debug("monitor: %s", exc)
        stop.wait(1.0)


def supervise(
    pipeline: Pipeline,
    state: RuntimeState,
    drain_requested: threading.Event,
    elector: Elector | None = None,
    on_tick: Callable[[], None] | None = None,
    progress: reports.TermProgress | None = None,
) -> str:
    """Run until something ends this term; returns what (DRAIN, HANDOFF, LOST, FAILED, FINISHED)."""
    stop_monitor = threading.Event()
    threading.Thread(target=_monitor, args=(pipeline, state, stop_monitor, progress), daemon=True).start()
    try:
        while True:
            if drain_requested.is_set():
                return DRAIN
            if elector is not None and elector.lost.is_set():
                return LOST
            if elector is not None and elector.handoff.is_set():
                return HANDOFF
            if pipeline.failure is not None:
                return FAILED
            # each query looked at once per tick (see sluice_runtime.queryend)
            end = queryend.ended(queryend.look(pipeline.all_queries()))
            if end is not None:
                _, failed = end
                if failed is None:
                    log.info("all queries finished")
                    return FINISHED
                if elector is not None and elector.may_write() is not None:
                    return LOST  # the write guard stopped it: the lease ran out (a paused driver)
                if elector is not None and pipeline.eos_sink is not None and pipeline.eos_sink.fenced:
                    return LOST  # a newer holder fenced its producer (it rode out an API outage)
                exc = failed.failure
                print(f"sluice-runtime: query {failed.name} failed: {getattr(exc, 'desc', exc)}",
                      file=sys.stderr)
                return FAILED
            if on_tick is not None:
                on_tick()
            time.sleep(0.1)
    finally:
        stop_monitor.set()


def close_writes(pipeline: Pipeline, state: RuntimeState, end: str) -> int:
    """The first half of ending a term: make sure nothing more is written (the exit code it stands
    for). A drain or a hand-off closes the batch gate and waits for the commit of the batch inside
    it (:func:`sluice_runtime.drain.close`); a lost Lease closes the gate at once (the write guard
    already refuses every batch). A driver under election releases its Lease after this, before
    :func:`stop_queries`: its successor need not wait for Spark to stop."""
    if end in (DRAIN, HANDOFF):
        state.health.draining = True
        try:
            last = pipeline.main.lastProgress
            if last:  # the steady state, to compare a takeover's first batch with
                log.info("draining after batch %s: %s", last["batchId"], dict(last["durationMs"] or {}))
        except Exception as exc:  # the query may have failed
            log.debug("no last progress: %s", exc)
        clean = drain_mod.close(pipeline.gate, pipeline.queries())
        log.info("drained%s", "" if clean else " (a commit did not appear in time)")
        return 0 if clean else 1
    if end == LOST:
        pipeline.gate.close(timeout=0)
        pipeline.gate.release()
    return 1 if end in (FAILED, LOST) else 0


def stop_queries(pipeline: Pipeline, state: RuntimeState, end: str) -> None:
    """The second half: stop the term's queries (a drained one also forgets the batches held at
    its gate, :func:`sluice_runtime.drain.stop`)."""
    if end in (DRAIN, HANDOFF):
        drain_mod.stop(pipeline.gate, pipeline.queries())
    for q in pipeline.all_queries():
        try:
            if q.isActive:
                q.stop()
        except Exception:
            pass
    state.health.active = False


def finish(pipeline: Pipeline, state: RuntimeState, end: str) -> int:
    """Without election: stop the term's queries the way ``end`` asks and close the exactly-once
    sink; the exit code it stands for."""
    code = close_writes(pipeline, state, end)
    stop_queries(pipeline, state, end)
    if pipeline.eos_sink is not None:
        pipeline.eos_sink.close()
    return code


# -- election ------------------------------------------------------------------------------


def set_pod_role(api: KubeApi | None, namespace: str, pod: str, role: str) -> None:
    """Label this driver's pod with its role (best effort: the Lease is the truth)."""
    if api is None or not pod:
        return
    cost = ACTIVE_DELETION_COST if role == "active" else STANDBY_DELETION_COST
    try:
        api.patch_pod_metadata(namespace, pod, {ROLE_LABEL: role}, {DELETION_COST: cost})
        log.info("pod %s/%s labelled %s=%s", namespace, pod, ROLE_LABEL, role)
    except Exception as exc:
        log.warning("cannot label pod %s/%s as %s: %s", namespace, pod, role, exc)


def report_refusal(config: RunConfig, plan_hash: str, error_class: str, message: str) -> None:
    """Report on this driver's pod that it refuses its plan (before any JVM or Lease): the health
    gate of the upgrade that brought the plan fails on it."""
    from sluice_runtime.kubeapi import KubeApi, KubeConfig

    try:
        api = KubeApi(KubeConfig.from_env(os.environ))
    except Exception as exc:  # never hide the refusal being reported
        log.warning("cannot reach the API server to report the refusal: %s", exc)
        return
    reports.report_error(api, config.lease_namespace or "", config.pod_name or "", DriverError(
        plan_hash, reports.WARM_UP, error_class, message, reports.now_rfc3339()))


def identity_for(pod: str) -> str:
    return f"{pod or os.uname().nodename}/{uuid.uuid4().hex[:8]}"


def advertised_address(http_addr: str | None, env: dict[str, str]) -> str | None:
    """HOST:PORT other drivers reach this one's endpoint at."""
    if not http_addr:
        return None
    host, _, port = http_addr.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = env.get("POD_IP") or env.get("SLUICE_POD_IP") or "127.0.0.1"
    return f"{host}:{port}"


def give_back(executors: ExecutorHold, spark: Any) -> None:
    """A driver standing by again gives its executors back; one that cannot goes on standing by
    with them (logged: the next takeover finds them there)."""
    try:
        executors.release(spark.sparkContext)
    except Exception as exc:
        log.warning("executors: cannot give them back while standing by: %s", exc)


def run_elected(
    config: RunConfig,
    plan: Plan,
    spark: Any,
    state: RuntimeState,
    drain_requested: threading.Event,
    query_id: str,
    standby: StandbyExecutors | None = None,
) -> int:
    """Stand by, take the Lease, run terms (:func:`_term`) until drained. ``standby``: what this
    driver does with executor pods while it stands by (:mod:`sluice_runtime.standby_executors`;
    None: it has none, or holds them)."""
    from sluice_runtime.elector import Elector
    from sluice_runtime.kubeapi import KubeApi, KubeConfig
    from sluice_runtime.pipeline import prepare_pipeline
    from sluice_runtime.warmup import warm_up_plan

    assert config.lease_name and config.lease_namespace
    api = KubeApi(KubeConfig.from_env(os.environ))
    pod = config.pod_name or ""
    state.identity = state.identity or identity_for(pod)
    state.role = "warming"
    set_pod_role(api, config.lease_namespace, pod, "standby")  # a restarted container is no longer active
    elector = Elector(api, namespace=config.lease_namespace, name=config.lease_name, identity=state.identity,
                      address=advertised_address(config.http_addr, dict(os.environ)),
                      plan_hash=state.plan_hash, engine=config.engine, duration=config.lease_seconds,
                      ride_out=plan.sink.delivery == "exactlyOnce")
    state.metrics.api_away.set_function(lambda: elector.api_away_seconds)
    try:
        started = time.monotonic()
        # Warm up on the plan only while another driver serves: with nobody serving, start now.
        # A standby without executors cannot run the plan's tasks: it does not warm up.
        executors = ExecutorHold(standby or StandbyExecutors(HOLD, 0))
        can_warm_up = not executors.policy.released
        warm_up = "plan" if can_warm_up and elector.someone_serving() else "none"
        try:
            prepared = prepare_pipeline(
                spark, plan, bootstrap=config.bootstrap, query_id=query_id, security=config.kafka,
                consumer_group=config.consumer_group, warm_up=warm_up, checkpoint=config.checkpoint,
                avro=config.avro,
            )
        except Exception as exc:
            reports.report_exception(api, config.lease_namespace, pod, plan, state.plan_hash, reports.WARM_UP,
                                     exc)
            raise
        log.info("standby: ready in %.1fs (plan %s, warm-up %s), waiting for lease %s/%s",
                 time.monotonic() - started, plan.hash[:12], warm_up, config.lease_namespace,
                 config.lease_name)
        warmed = warm_up == "plan"

        cancel_warm_up = threading.Event()
        warming: list[threading.Thread] = []

        def warm_up_late() -> None:
            """Another driver took the Lease first (drivers started together): warm up now, in
            the background, so that the wait for the Lease goes on (a holder that dies meanwhile
            is taken over at once, the warm-up cancelled)."""
            def run() -> None:
                nonlocal warmed
                log.info("standby: warming up on the plan while another driver serves")
                # the pod stays Ready ("standby"): readiness that flapped would disturb rollouts
                took = warm_up_plan(prepared.ctx, cancel=cancel_warm_up, checkpoint=config.checkpoint)
                warmed = True
                record = elector.record()
                log.info("standby: warmed up on the plan in %.1fs while %s serves%s", took,
                         record.holder if record else "another driver",
                         " (cancelled: taking over)" if cancel_warm_up.is_set() else "")

            thread = threading.Thread(target=run, name="warm-up", daemon=True)
            warming.append(thread)
            thread.start()

        while True:
            state.role = "standby"
            state.metrics.set_role("standby")
            state.health.draining = False
            set_pod_role(api, config.lease_namespace, pod, "standby")
            late = None if warmed or not can_warm_up else warm_up_late
            leadership = elector.wait_for_leadership(drain_requested, while_held=late)
            cancel_warm_up.set()  # a late warm-up still running stops its queries first
            if leadership is None:
                log.info("standby: stopped before taking over")
                return 0
            executors.acquire(spark.sparkContext)  # their pods start while the epoch is prepared
            for thread in warming:
                thread.join(10)
            log.debug("active: %s threads at normal priority", set_priority(own_pids(spark), 0))
            end, code = _term(config, prepared, state, drain_requested, elector, api, pod, leadership)
            warmed = True  # it ran the plan as the active driver
            if end == LOST:
                set_priority(own_pids(spark), STANDBY_NICE)
            if end in (HANDOFF, LOST):  # a hand-off lowered it before stopping its queries
                give_back(executors, spark)
                continue
            if end == DRAIN:
                stay_out_of_the_way(elector, leadership.epoch)
                if config.master.startswith("local"):
                    elector.close()
                    exit_at_once(code)
            return code
    finally:
        elector.close()


def _fresh_start(config: RunConfig, prepared: Prepared,
                 before: tuple[int, float] | None) -> tuple[Prepared, tuple[int, float] | None]:
    """The first term on a checkpoint without offsets: the pipeline rebuilt to start at the
    previous version's end (:mod:`sluice_runtime.replace`) and, for the sources that has none for
    (all without a previous version), at ``config.start_from``; and the gap meter's reference: the
    previous version's last commit (any batch of the new checkpoint comes after it)."""
    from sluice_runtime.pipeline import with_start_offsets
    from sluice_runtime.replace import hand_off_start

    offsets: dict[str, str] = {}
    if config.previous is not None:
        start = hand_off_start(config.previous, prepared.plan, config.bootstrap, config.kafka,
                               config.eos_writers)
        if start.checkpoint is not None:
            last = epochs.last_commit_time(start.checkpoint)
            before = (-1, last[1]) if last is not None else before
        offsets = start.offsets
    if config.start_from is not None:
        log.info("active: a checkpoint without offsets: the sources start at %s", config.start_from)
    if offsets or config.start_from is not None:
        prepared = with_start_offsets(prepared, offsets, start_from=config.start_from)
    return prepared, before


def _term(config: RunConfig, prepared: Prepared, state: RuntimeState, drain_requested: threading.Event,
          elector: Elector, api: KubeApi, pod: str, leadership: Any) -> tuple[str, int]:
    """One term as the active driver. The pod is labelled active beside the start (not before it:
    the label is for routing and the rollout's order, and a takeover's first batch waits for no
    API call it does not need)."""
    labeller = threading.Thread(target=set_pod_role, args=(api, config.lease_namespace or "", pod, "active"),
                                daemon=True)
    labeller.start()
    try:
        return _run_term(config, prepared, state, drain_requested, elector, api, pod, leadership)
    finally:
        labeller.join(10)  # before a later label (standby) can be written


def _run_term(config: RunConfig, prepared: Prepared, state: RuntimeState, drain_requested: threading.Event,
              elector: Elector, api: KubeApi, pod: str, leadership: Any) -> tuple[str, int]:
    from sluice_runtime.pipeline import renewed_after_failure, start_pipeline, with_new_writer_schemas

    state.role = "active"
    state.epoch = leadership.epoch
    state.metrics.set_role("active")
    state.health = type(state.health)()
    takeover: Takeover = leadership.takeover
    failover = leadership.why in (Why.EXPIRED, Why.HOLDER_DEAD)
    acquired_wall = time.time()
    namespace, plan, plan_hash = config.lease_namespace or "", prepared.plan, state.plan_hash
    try:
        start = prepare_start(config.checkpoint, leadership.epoch, plan, plan_hash, leadership.previous_plan,
                              leadership.annotations, reports.now_rfc3339(), engine=config.engine,
                              previous_engine=leadership.previous_engine, holder=state.identity)
        elector.report(start.annotations())
        checkpoint, source = start.checkpoint, start.source
        before = epochs.last_commit_time(source) if source else None
        fresh_start = config.previous is not None or config.start_from is not None
        if fresh_start and drain_mod.last_offsets(checkpoint) is None:
            # the first term of a replaced version: start where the previous version's output
            # ends (hand-off), or where the backfill starts
            prepared, before = _fresh_start(config, prepared, before)
        if avro.has_sources(plan):  # a standby built earlier: the source subjects may have grown
            prepared = with_new_writer_schemas(prepared) or prepared
        meter = GapMeter(checkpoint, before, acquired_wall)
        gate = drain_mod.BatchGate(guard=elector.may_write)
        pipeline = start_pipeline(prepared, checkpoint=str(checkpoint), available_now=config.available_now,
                                  transactional_id=config.transactional_id, gate=gate,
                                  defer_dead_letters=True, eos_writers=config.eos_writers)
        begun = time.monotonic()
    except StartRefused as refused:
        print(f"sluice-runtime: not started: {refused.error_class}: {refused.message}", file=sys.stderr)
        reports.report_error(api, namespace, pod, DriverError(
            plan_hash, reports.ACTIVE, refused.error_class, refused.message, reports.now_rfc3339()))
        elector.release()
        state.health.active = False
        return FAILED, 1
    except Exception as exc:
        reports.report_exception(api, namespace, pod, plan, plan_hash, reports.ACTIVE, exc)
        elector.release()
        raise
    log.info("active: took over (%s) from %r, epoch %s, on %s", leadership.why, takeover.from_pod or None,
             leadership.epoch, checkpoint)
    if takeover.from_pod:
        (state.metrics.failovers if failover else state.metrics.handoffs).inc()
    epochs.prune(config.checkpoint, leadership.epoch)

    def on_tick() -> None:
        gap = meter.poll()
        if gap is None:
            return
        sink_timings = pipeline.eos_sink.last_timings if pipeline.eos_sink is not None else {}
        log.info("active: first commit %.2fs after the previous holder's last (exactly-once sink: %s)", gap,
                 {k: round(v, 3) for k, v in sink_timings.items()})
        if takeover.from_pod:
            state.metrics.takeover_gap.labels("failover" if failover else "handoff").observe(gap)
        record = Takeover(**{**takeover.__dict__, "gap_seconds": round(gap, 3)})
        elector.annotate({LAST_TAKEOVER: record.to_json()})

    cleaner = CheckpointCleaner(elector, config.checkpoint)
    first_batch = FirstBatchLog(pipeline.main, meter)

    def every_tick() -> None:
        on_tick()
        if pipeline.deferred and (meter.gap is not None or time.monotonic() - begun > DEAD_LETTER_DEFER):
            pipeline.start_deferred()  # after the main query's first commit
        first_batch.poll()
        cleaner.poll()

    progress = reports.TermProgress(elector, plan_hash, leadership.epoch)
    lag = BrokerLag(state.metrics, config.bootstrap, config.kafka).start()
    try:
        end = supervise(pipeline, state, drain_requested, elector, every_tick, progress)
        # a record with a schema id its avro source's subject did not have at build: fetched anew,
        # the query starts again on the term's checkpoint, the Lease held (the failed batch runs again)
        while end == FAILED and (renewed := renewed_after_failure(prepared, pipeline)) is not None:
            log.warning("active: a source subject has new schema ids; the query starts again")
            stop_queries(pipeline, state, end)
            if pipeline.eos_sink is not None:
                pipeline.eos_sink.close()
            prepared = renewed
            try:
                pipeline = start_pipeline(prepared, checkpoint=str(checkpoint), gate=gate,
                                          available_now=config.available_now,
                                          transactional_id=config.transactional_id,
                                          eos_writers=config.eos_writers)
            except Exception as exc:
                reports.report_exception(api, namespace, pod, plan, plan_hash, reports.ACTIVE, exc)
                elector.release()
                raise
            end = supervise(pipeline, state, drain_requested, elector, every_tick, progress)
    finally:
        lag.stop()
    request = elector.handoff_request
    failure = (pipeline.failure or reports.query_failure(pipeline.all_queries())) if end == FAILED else None
    code = close_writes(pipeline, state, end)
    handing_over = end in (DRAIN, HANDOFF)
    if not handing_over:
        stop_queries(pipeline, state, end)
    if failure is not None:
        reports.report_exception(api, namespace, pod, plan, plan_hash, reports.ACTIVE, failure)
    if end == LOST:
        elector.step_down()
        log.error("active: lease lost; stopped without committing, back to standby")
    elif end == HANDOFF:
        elector.release(preferred_pod=request.to if request else "",
                        handoff_id=request.id if request else None)
    else:
        elector.release()
    if pipeline.eos_sink is not None:  # after the release: the successor need not wait for it
        pipeline.eos_sink.close()
    if handing_over:
        # Released with the queries still there, held at the closed gate: the successor starts
        # while they stop. A drained driver with a local master exits without stopping them
        # (run_elected); otherwise they stop now, at the standby's priority.
        state.health.active = False
        if end == HANDOFF or not config.master.startswith("local"):
            log.info("released: stopping the queries held at the gate")
            set_priority(own_pids(prepared.ctx.spark), STANDBY_NICE)
            stop_queries(pipeline, state, end)
        else:
            log.info("released: the queries stay held at the gate until the process ends")
    return end, code
