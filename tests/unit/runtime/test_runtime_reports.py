"""What a driver reports to the operator, without Spark or a cluster: the progress count, the
error record of a failed query, checkpoint backstops (kept, never pruned, verified) and restore
requests, and the Lease writes of the elector (an in-memory API server)."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sluice.core.driverreport import (
    BACKSTOP,
    DRIVER_ERROR,
    HOLDER_PROGRESS,
    RESTORE_DONE,
    RESTORE_REQUEST,
    Backstop,
    DriverError,
    Progress,
    RestoreRequest,
)
from sluice.core.election import HANDOFF_DONE, HANDOFF_REQUEST, HOLDER_PLAN, HandoffRequest
from sluice.core.plan.model import Plan
from sluice_runtime import backstop, epochs, reports
from sluice_runtime.elector import Elector
from sluice_runtime.kubeapi import KubeApiError
from sluice_runtime.metrics import total_lag
from sluice_runtime.startpoint import BACKSTOP_MISSING, CHECKPOINT_INCOMPATIBLE, StartRefused, prepare_start

from tests.support.runtime import plan_from_yaml

T = "2026-05-01T10:00:00Z"


def make_plan(sql: str = "SELECT id, CAST(code AS INT) AS n FROM feed", partitions: int = 8) -> Plan:
    return plan_from_yaml(f"""\
  shufflePartitions: {partitions}
  sources:
    - name: feed
      topic: t-in
      schema: [{{name: id, type: int}}, {{name: code, type: string}}]
  sql: {sql}
  sink: {{topic: t-out}}
""")


# -- progress ---------------------------------------------------------------------------------

QID = "640161ad-dd5a-4152-bcbe-e774feec4660"
IDLE = ["latestOffset", "triggerExecution"]
RAN = ["addBatch", "commitOffsets", "getBatch", "latestOffset", "queryPlanning", "triggerExecution",
       "walCommit"]


def progress(batch: int, ts: str, rows: int, durations: list[str], qid: str = QID) -> dict[str, Any]:
    return {"id": qid, "batchId": batch, "timestamp": ts, "numInputRows": rows,
            "durationMs": {k: 1 for k in durations}}


def test_idle_triggers_are_progress_events_but_no_batches() -> None:
    # what Spark 4 reports (seen on a real query): idle triggers carry the *next* batch id
    counter = reports.ProgressCounter()
    idle = [progress(0, f"2026-05-01T10:00:0{i}.000Z", 0, IDLE) for i in range(3)]
    counter.observe(idle, main=True)
    assert (counter.batches, counter.events) == (0, 3)
    ran = progress(0, "2026-05-01T10:00:05.000Z", 2, RAN)
    counter.observe([*idle, ran], main=True)  # recentProgress: the same reports again, and a new one
    assert (counter.batches, counter.events) == (1, 4)
    counter.observe([*idle, ran, progress(1, "2026-05-01T10:00:06.000Z", 0, IDLE)], main=True)
    assert (counter.batches, counter.events) == (1, 5)


def test_a_batch_without_input_that_ran_counts_and_a_dead_letter_query_counts_for_nothing() -> None:
    counter = reports.ProgressCounter()
    counter.observe([progress(7, "t1", 0, RAN)], main=True)  # a watermark moved: a batch without input
    # a dead-letter query reads the same source and runs its batches even while the main query
    # fails every one of its own: none of it is a sign that the plan works
    counter.observe([progress(7, "t1", 5, RAN, qid="dlq"), progress(8, "t2", 3, RAN, qid="dlq")], main=False)
    assert counter.record("h", 4) == Progress("h", 4, batches=1, progress_events=1)


def test_a_trigger_that_found_input_but_ran_no_batch_is_no_sign_of_life() -> None:
    counter = reports.ProgressCounter()
    planned = {**progress(120, "t1", 0, IDLE), "sources": [{"startOffset": {"t": {"0": 5}},
                                                           "endOffset": {"t": {"0": 9}}}]}
    idle = {**progress(120, "t2", 0, IDLE), "sources": [{"startOffset": {"t": {"0": 9}},
                                                        "endOffset": {"t": {"0": 9}}}]}
    counter.observe([planned], main=True)
    assert (counter.batches, counter.events) == (0, 0)
    counter.observe([planned, idle], main=True)
    assert (counter.batches, counter.events) == (0, 1)


def test_input_rows_and_dead_letters_of_the_term_are_counted_for_the_gate() -> None:
    counter = reports.ProgressCounter()
    first = {**progress(0, "t1", 10, RAN), "observedMetrics": {"malformed-src-1": {"malformed": 2}}}
    second = {**progress(1, "t2", 30, RAN), "observedMetrics": {"malformed-src-1": {"malformed": 1},
                                                                "malformed-src-2": {"malformed": 4}}}
    counter.observe([first, second, first], main=True)
    record = counter.record("h", 2)
    assert (record.input_rows, record.dead_letters) == (40, 7)
    assert Progress.from_json(record.to_json()) == record


def test_the_lag_travels_in_the_progress_record_only_when_known() -> None:
    with_lag = Progress("h", 2, 5, 7, 40, 1, lag_records=1234)
    text = with_lag.to_json()
    assert json.loads(text)["lagRecords"] == 1234
    assert Progress.from_json(text) == with_lag
    without = Progress("h", 2, 5, 7, 40, 1)
    assert "lagRecords" not in json.loads(without.to_json())
    assert Progress.from_json(without.to_json()) == without and without.lag_records is None
    zero = Progress("h", 2, 5, 7, lag_records=0)
    assert Progress.from_json(zero.to_json()) == zero  # caught up, not unknown
    # a record written before the field existed
    old = '{"batches":3,"deadLetters":0,"epoch":1,"inputRows":9,"planHash":"h","progressEvents":4}'
    assert Progress.from_json(old) == Progress("h", 1, 3, 4, 9, 0, None)


def kafka_source(start: Any, end: Any, latest: Any) -> dict[str, Any]:
    """A Kafka source's part of a progress report (offsets as Spark gives them)."""
    out: dict[str, Any] = {"description": "KafkaV2[Subscribe[t]]", "startOffset": start, "endOffset": end,
                           "numInputRows": 0}
    if latest is not None:
        out["latestOffset"] = latest
    return out


def test_the_lag_is_latest_minus_end_over_every_source_and_partition() -> None:
    report = {**progress(3, "t1", 10, RAN), "sources": [
        # PySpark 4 gives the offsets as JSON text
        kafka_source('{"orders":{"0":90,"1":80}}', '{"orders":{"0":100,"1":95}}',
                     '{"orders":{"0":130,"1":95}}'),
        # parsed already (earlier PySpark, lastProgress dicts)
        kafka_source({"customers": {"0": 4}}, {"customers": {"0": 7}}, {"customers": {"0": 12}}),
        # no latestOffset: adds nothing
        kafka_source('{"returns":{"0":1}}', '{"returns":{"0":2}}', None),
    ]}
    assert total_lag(report) == 30 + 0 + 5
    # never negative (a latest offset read before the batch's end was planned)
    behind = {**report, "sources": [kafka_source('{"t":{"0":1}}', '{"t":{"0":9}}', '{"t":{"0":8}}')]}
    assert total_lag(behind) == 0
    # no source says where its end is: not known (not 0)
    assert total_lag({**report, "sources": [kafka_source('{"t":{"0":1}}', '{"t":{"0":2}}', None)]}) is None
    assert total_lag({**report, "sources": []}) is None


def test_the_counter_keeps_the_lag_of_the_main_query_s_newest_report() -> None:
    counter = reports.ProgressCounter()
    assert counter.record("h", 1).lag_records is None

    def report(batch: int, ts: str, end: int, latest: int, qid: str = QID) -> dict[str, Any]:
        return {**progress(batch, ts, 5, RAN, qid=qid), "sources": [
            kafka_source('{"t":{"0":0}}', json.dumps({"t": {"0": end}}), json.dumps({"t": {"0": latest}}))]}

    first = report(0, "2026-05-01T10:00:01.000Z", 100, 1100)
    second = report(1, "2026-05-01T10:00:02.000Z", 900, 1000)
    counter.observe([first], main=True)
    assert counter.lag_records == 1000
    counter.observe([first, second], main=True)
    assert counter.record("h", 1).lag_records == 100
    counter.observe([first, second], main=True)  # seen before: the newest still decides
    assert counter.lag_records == 100
    # a dead-letter query reads the same source at its own pace: its lag is not the query's
    counter.observe([report(5, "2026-05-01T10:00:03.000Z", 0, 1000, qid="dlq")], main=False)
    assert counter.lag_records == 100


def test_a_changed_lag_is_reported_again() -> None:
    elector = Reported()
    term = reports.TermProgress(elector, "h1", 3)  # type: ignore[arg-type]
    idle = {**progress(1, "t1", 0, IDLE), "sources": [
        kafka_source('{"t":{"0":9}}', '{"t":{"0":9}}', '{"t":{"0":9}}')]}
    term.observe([idle], main=True)
    # new input came (a trigger that planned it and has not run it counts for nothing else)
    planned = {**idle, "timestamp": "t2", "sources": [
        kafka_source('{"t":{"0":9}}', '{"t":{"0":15}}', '{"t":{"0":26}}')]}
    term.observe([idle, planned], main=True)
    assert [Progress.from_json(c[HOLDER_PROGRESS]) for c in elector.calls] == [
        Progress("h1", 3, 0, 1, lag_records=0), Progress("h1", 3, 0, 1, lag_records=11)]


class Reported:
    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def report(self, annotations: dict[str, str]) -> None:
        self.calls.append(annotations)


def test_the_term_progress_is_handed_to_the_elector_only_when_it_changed() -> None:
    elector = Reported()
    term = reports.TermProgress(elector, "h1", 3)  # type: ignore[arg-type]
    term.observe([], main=True)
    assert elector.calls == []  # batches 0: what the acquire wrote already
    first = [progress(0, "t1", 2, RAN)]
    term.observe(first, main=True)
    term.observe(first, main=True)
    assert [Progress.from_json(c[HOLDER_PROGRESS]) for c in elector.calls] == [Progress("h1", 3, 1, 1, 2)]


# -- errors -----------------------------------------------------------------------------------

CAST_MESSAGE = ("[CAST_INVALID_INPUT] The value 'x7' of the type \"STRING\" cannot be cast to \"INT\" "
                "because it is malformed. Correct the value as per the syntax, or change its target type. "
                "Use `try_cast` to tolerate malformed input and return NULL instead. SQLSTATE: 22018\n"
                "== SQL (line 1, position 1) ==\nCAST(code AS INT)\n^^^^^^^^^^^^^^^^^\n")
QUERY_INFO = ("\n=== Streaming Query ===\nIdentifier: plan-1d3ade7cbfbc0fc9 [id = 640161ad-dd5a-4152-bcbe-"
              "e774feec4660, runId = c19b0594-5923-4afb-ad8f-8b5f3d1978dd]\nCurrent Committed Offsets: {}\n"
              "Current State: ACTIVE\nThread State: RUNNABLE\n\nLogical Plan:\nWriteToMicroBatchDataSource\n")


class Captured(Exception):
    """The attributes pyspark 4 gives a captured JVM exception (``pyspark.errors.exceptions.
    captured``): ``_desc``, ``_stackTrace`` and the converted ``_cause``; no ``desc``."""

    def __init__(self, desc: str, stack: str, cause: Captured | None = None) -> None:
        super().__init__(desc)
        self._desc = desc
        self._stackTrace = stack
        self._cause = cause


def streaming_query_exception(desc: str) -> Captured:
    """As ``StreamingQuery.exception()`` builds it: the message, the frames of the
    StreamingQueryException itself, and its cause (here Spark's SparkNumberFormatException)."""
    cause = Captured(CAST_MESSAGE, "org.apache.spark.SparkNumberFormatException: " + CAST_MESSAGE +
                     "\n\tat org.apache.spark.sql.errors.QueryExecutionErrors$."
                     "invalidInputInCastToNumberError(QueryExecutionErrors.scala:132)\n\tat "
                     "org.apache.spark.SparkException$.internalError(SparkException.scala:1)\n")
    frames = ("org.apache.spark.sql.execution.streaming.runtime.StreamExecution.org$apache$spark$sql$"
              "execution$streaming$runtime$StreamExecution$$runStream(StreamExecution.scala:394)\n\t at "
              "org.apache.spark.sql.execution.streaming.runtime.StreamExecution$$anon$1.run("
              "StreamExecution.scala:236)")
    return Captured(desc, frames, cause)


@pytest.mark.parametrize("desc", [
    CAST_MESSAGE + QUERY_INFO,  # Spark 4.1: the cause's message
    "[STREAM_FAILED] Query [id = 640161ad-dd5a-4152-bcbe-e774feec4660, runId = c19b0594-5923-4afb-ad8f-"
    "8b5f3d1978dd] terminated with exception: " + CAST_MESSAGE + QUERY_INFO,  # Spark 3.5/4.0: wrapped
])
def test_the_error_of_a_failed_query_names_spark_class_message_and_step(desc: str) -> None:
    plan = make_plan()
    error = reports.driver_error(plan, "h1", reports.ACTIVE, streaming_query_exception(desc), time=T)
    assert error.error_class == "CAST_INVALID_INPUT"
    assert error.message.startswith("[CAST_INVALID_INPUT] The value 'x7' of the type")
    assert error.step == "project-1"
    assert (error.plan_hash, error.phase, error.time) == ("h1", "active", T)
    assert DriverError.from_json(error.to_json()) == error


def test_without_a_spark_error_class_the_innermost_java_exception_is_named() -> None:
    cause = Captured("Failed to construct kafka producer", "org.apache.kafka.common.KafkaException: "
                     "Failed to construct kafka producer\n\tat org.apache.kafka.clients.producer."
                     "KafkaProducer.<init>(KafkaProducer.java:1)\nCaused by: "
                     "org.apache.kafka.common.config.ConfigException: No resolvable bootstrap urls given in "
                     "bootstrap.servers\n\t... 30 more\n")
    exc = Captured("Failed to construct kafka producer" + QUERY_INFO, "org.apache.spark.X.run(X.scala:1)",
                   cause)
    error = reports.driver_error(make_plan(), "h1", reports.ACTIVE, exc, time=T)
    assert (error.error_class, error.message, error.step) == (
        "ConfigException", "Failed to construct kafka producer", None)


def test_a_python_error_in_warm_up_is_named_by_its_type() -> None:
    exc = TimeoutError("topics not created")
    error = reports.driver_error(make_plan(), "h1", reports.WARM_UP, exc, time=T)
    assert (error.error_class, error.message, error.phase) == ("TimeoutError", str(exc), "warm-up")


class PodApi:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.patches: list[tuple[str, str, dict[str, str], dict[str, str]]] = []

    def patch_pod_metadata(self, ns: str, name: str, labels: dict[str, str],
                           annotations: dict[str, str]) -> None:
        if self.fail:
            raise KubeApiError(403, "pods is forbidden")
        self.patches.append((ns, name, labels, annotations))


def test_the_error_goes_on_the_own_pod_and_a_failed_patch_hides_nothing() -> None:
    api = PodApi()
    reports.report_exception(api, "ns", "q-driver-a", make_plan(), "h1", reports.ACTIVE,  # type: ignore[arg-type]
                             streaming_query_exception(CAST_MESSAGE))
    [(ns, pod, labels, annotations)] = api.patches
    assert (ns, pod, labels) == ("ns", "q-driver-a", {})
    recorded = DriverError.from_json(annotations[DRIVER_ERROR])
    assert recorded is not None and recorded.error_class == "CAST_INVALID_INPUT"
    failing = PodApi(fail=True)
    error = DriverError("h1", "active", "X", "m", T)
    assert reports.report_error(failing, "ns", "q-driver-a", error) is False  # type: ignore[arg-type]
    assert reports.report_error(None, "ns", "q-driver-a", error) is False


class Query:
    def __init__(self, exc: BaseException | None) -> None:
        self._exc = exc

    def exception(self) -> BaseException | None:
        return self._exc


def test_the_failure_of_a_term_is_the_first_query_with_an_exception() -> None:
    boom = ValueError("boom")
    assert reports.query_failure([Query(None), Query(boom), Query(KeyError())]) is boom
    assert reports.query_failure([Query(None)]) is None


# -- epochs and backstops ---------------------------------------------------------------------


def write(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def spark_checkpoint(root: Path, batches: int, conf: dict[str, str] | None = None) -> None:
    write(root / "metadata", '{"id":"q1"}')
    for n in range(batches):
        write(root / "offsets" / str(n), "v1\n" + json.dumps({"conf": conf or {}}) + "\n{}")
        write(root / "commits" / str(n), f"commit {n}")


def test_prune_never_deletes_a_backstop_and_keeps_the_newest_three(tmp_path: Path) -> None:
    for e in range(1, 9):
        epochs.prepare(tmp_path, e)
    for e in (1, 2, 3, 5):
        epochs.keep_backstop(tmp_path, Backstop(e, f"p{e}", f"p{e + 1}", T))
    assert [b.epoch for b in epochs.backstops(tmp_path)] == [2, 3, 5]  # 1 dropped out of the list
    assert epochs.prune(tmp_path, 8) == [1, 4, 6]
    assert epochs.epochs(tmp_path) == [2, 3, 5, 7, 8]
    assert epochs.backstops(tmp_path)[-1] == Backstop(5, "p5", "p6", T)


def test_prepare_links_from_a_source_given_instead_of_the_newest_epoch(tmp_path: Path) -> None:
    old, _ = epochs.prepare(tmp_path, 1)
    spark_checkpoint(old, 2)
    newer, _ = epochs.prepare(tmp_path, 2)
    write(newer / "commits" / "2", "commit 2")
    target, source = epochs.prepare(tmp_path, 3, source=old)
    assert source == old
    assert sorted(p.name for p in (target / "commits").iterdir()) == ["0", "1"]
    assert epochs.epoch_of(source, tmp_path) == 1 and epochs.epoch_of(tmp_path, tmp_path) is None


def test_a_new_query_records_its_signature_and_keeps_no_backstop(tmp_path: Path) -> None:
    plan = make_plan()
    start = prepare_start(tmp_path, 1, plan, plan.hash, "", {}, T)
    assert start.source is None and start.backstop is None and start.annotations() == {}
    assert backstop.has_signature(start.checkpoint)


def test_a_switch_of_plan_keeps_the_source_epoch_untouched_as_a_backstop(tmp_path: Path) -> None:
    old_plan, new_plan = make_plan(), make_plan("SELECT id, code FROM feed")
    first = prepare_start(tmp_path, 1, old_plan, old_plan.hash, "", {}, T)
    spark_checkpoint(first.checkpoint, 3)
    same = prepare_start(tmp_path, 2, old_plan, old_plan.hash, old_plan.hash, {}, T)
    assert same.backstop is None and epochs.backstops(tmp_path) == []
    switched = prepare_start(tmp_path, 3, new_plan, new_plan.hash, old_plan.hash, {}, T)
    assert switched.backstop == Backstop(2, old_plan.hash, new_plan.hash, T)
    assert Backstop.from_json(switched.annotations()[BACKSTOP]) == switched.backstop
    assert epochs.backstops(tmp_path) == [switched.backstop]
    # the new plan's signature is in the new epoch only: the backstop keeps the old one
    old_sig = json.loads((epochs.epoch_dir(tmp_path, 2) / backstop.SIGNATURE_FILE).read_text())
    new_sig = json.loads((switched.checkpoint / backstop.SIGNATURE_FILE).read_text())
    assert (old_sig["planHash"], new_sig["planHash"]) == (old_plan.hash, new_plan.hash)
    for e in (4, 5, 6):
        epochs.prepare(tmp_path, e)
    epochs.prune(tmp_path, 6)
    assert epochs.epochs(tmp_path) == [2, 5, 6]


def test_a_switch_of_engine_keeps_a_backstop_for_the_same_plan(tmp_path: Path) -> None:
    plan = make_plan()
    e1, e2 = "1" * 64, "2" * 64
    first = prepare_start(tmp_path, 1, plan, plan.hash, "", {}, T, engine=e1)
    spark_checkpoint(first.checkpoint, 3)
    assert backstop.recorded_engine(first.checkpoint) == e1
    same = prepare_start(tmp_path, 2, plan, plan.hash, plan.hash, {}, T, engine=e1, previous_engine=e1)
    assert same.backstop is None
    # the new engine takes over: the epoch the old engine wrote last is kept, before its first batch
    moved = prepare_start(tmp_path, 3, plan, plan.hash, plan.hash, {}, T, engine=e2, previous_engine=e1)
    assert moved.backstop == Backstop(2, plan.hash, plan.hash, T, engine=e1, to_engine=e2)
    assert backstop.recorded_engine(moved.checkpoint) == e2
    assert backstop.recorded_engine(epochs.epoch_dir(tmp_path, 2)) == e1
    # a restore request for the old engine is carried out by a driver on the old engine only
    request = RestoreRequest(id="r1", epoch=2, plan_hash=plan.hash, engine=e1)
    annotations = {RESTORE_REQUEST: request.to_json()}
    ignored = prepare_start(tmp_path, 4, plan, plan.hash, plan.hash, annotations, T, engine=e2,
                            previous_engine=e2)
    assert ignored.restored is None
    restored = prepare_start(tmp_path, 5, plan, plan.hash, plan.hash, annotations, T, engine=e1,
                             previous_engine=e2)
    assert restored.restored == request and restored.source == epochs.epoch_dir(tmp_path, 2)


def test_a_checkpoint_that_does_not_fit_the_plan_refuses_the_start(tmp_path: Path) -> None:
    old_plan, new_plan = make_plan(partitions=8), make_plan(partitions=4)
    first = prepare_start(tmp_path, 1, old_plan, old_plan.hash, "", {}, T)
    spark_checkpoint(first.checkpoint, 2, conf={"spark.sql.shuffle.partitions": "8"})
    with pytest.raises(StartRefused) as refused:
        prepare_start(tmp_path, 2, new_plan, new_plan.hash, old_plan.hash, {}, T)
    assert refused.value.error_class == CHECKPOINT_INCOMPATIBLE
    assert "spark.sql.shuffle.partitions=8" in refused.value.message
    # the epoch is kept, and the refused plan's signature was not recorded in the new one
    assert [b.epoch for b in epochs.backstops(tmp_path)] == [1]
    assert backstop.recorded_plan(epochs.epoch_dir(tmp_path, 2)) == old_plan.hash
    # the old plan takes over again: the Lease names the refused plan, but the checkpoint was never
    # written by it, so this is no switch (no backstop of a copy, nothing to verify)
    back = prepare_start(tmp_path, 3, old_plan, old_plan.hash, new_plan.hash, {}, T)
    assert back.backstop is None and [b.epoch for b in epochs.backstops(tmp_path)] == [1]


def _resign(checkpoint: Path, **changes: Any) -> None:
    """Replace the checkpoint's recorded signature (a new file, as record writes it)."""
    path = checkpoint / backstop.SIGNATURE_FILE
    staging = path.with_name("resigned")
    staging.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    staging.replace(path)


def test_a_signature_of_another_version_is_checked_as_none_then_recorded_again(tmp_path: Path) -> None:
    """A checkpoint whose signature is of another version (say a newer runtime's, before the
    rollback of its engine) is checked as one without a signature: a switch of plan starts if the
    pinned settings and operators fit, and the checkpoint then records the new plan's signature in
    this runtime's version; the same plan re-records its own."""
    old_plan, new_plan = make_plan(), make_plan("SELECT id, code FROM feed")
    first = prepare_start(tmp_path, 1, old_plan, old_plan.hash, "", {}, T)
    spark_checkpoint(first.checkpoint, 2)
    # state of a step the new plan does not have: refused in this version ...
    gone = {"aggregate-1": {"type": "aggregateV1", "keys": ["`feed.id:int`"]}}
    _resign(first.checkpoint, steps=gone)
    with pytest.raises(StartRefused) as refused:
        prepare_start(tmp_path, 2, new_plan, new_plan.hash, old_plan.hash, {}, T)
    assert "aggregate-1" in refused.value.message
    # ... not compared in another one (the signature still names the plan that wrote it)
    _resign(epochs.epoch_dir(tmp_path, 2), version=backstop.SIGNATURE_VERSION + 1)
    assert not backstop.has_signature(epochs.epoch_dir(tmp_path, 2))
    switched = prepare_start(tmp_path, 3, new_plan, new_plan.hash, old_plan.hash, {}, T)
    assert switched.backstop == Backstop(2, old_plan.hash, new_plan.hash, T)
    recorded = json.loads((switched.checkpoint / backstop.SIGNATURE_FILE).read_text())
    assert (recorded["version"], recorded["planHash"]) == (backstop.SIGNATURE_VERSION, new_plan.hash)
    # the same plan on a checkpoint it signed in another version: signed again, in this one
    _resign(switched.checkpoint, version=backstop.SIGNATURE_VERSION + 1)
    same = prepare_start(tmp_path, 4, new_plan, new_plan.hash, new_plan.hash, {}, T)
    assert same.backstop is None and backstop.has_signature(same.checkpoint)
    assert backstop.recorded_plan(same.checkpoint) == new_plan.hash


def test_a_restore_request_for_this_plan_starts_from_the_backstop(tmp_path: Path) -> None:
    plan, newer = make_plan(), make_plan("SELECT id, code FROM feed")
    first = prepare_start(tmp_path, 1, plan, plan.hash, "", {}, T)
    spark_checkpoint(first.checkpoint, 2)
    upgraded = prepare_start(tmp_path, 2, newer, newer.hash, plan.hash, {}, T)
    write(upgraded.checkpoint / "commits" / "2", "commit 2 of the newer plan")
    request = RestoreRequest("r1", epoch=1, plan_hash=plan.hash)
    lease = {RESTORE_REQUEST: request.to_json(), HOLDER_PLAN: newer.hash}
    back = prepare_start(tmp_path, 3, plan, plan.hash, newer.hash, lease, T)
    assert back.source == epochs.epoch_dir(tmp_path, 1) and back.restored == request
    assert sorted(p.name for p in (back.checkpoint / "commits").iterdir()) == ["0", "1"]
    assert back.annotations() == {RESTORE_DONE: "r1"}  # no new backstop: the source is one already
    # done, or meant for another plan: the newest epoch as always
    done = {**lease, RESTORE_DONE: "r1"}
    assert prepare_start(tmp_path, 4, plan, plan.hash, plan.hash, done, T).source == back.checkpoint
    assert prepare_start(tmp_path, 5, newer, newer.hash, newer.hash, lease, T).restored is None


def test_a_restore_of_an_epoch_that_is_gone_refuses_the_start(tmp_path: Path) -> None:
    plan = make_plan()
    prepare_start(tmp_path, 1, plan, plan.hash, "", {}, T)
    lease = {RESTORE_REQUEST: RestoreRequest("r2", epoch=9, plan_hash=plan.hash).to_json()}
    with pytest.raises(StartRefused) as refused:
        prepare_start(tmp_path, 2, plan, plan.hash, plan.hash, lease, T)
    assert refused.value.error_class == BACKSTOP_MISSING
    assert not epochs.epoch_dir(tmp_path, 2).exists()


# -- the elector's Lease writes ---------------------------------------------------------------


class LeaseServer:
    """One Lease in memory, with resourceVersion conflicts as the API server has them."""

    def __init__(self, lease: dict[str, Any]) -> None:
        self.lease = lease
        self.puts: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def get_lease(self, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return copy.deepcopy(self.lease)

    def watch_lease(self, ns: str, name: str, rv: str, timeout: float = 60) -> Any:
        time.sleep(0.05)
        return iter(())

    def replace_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if lease["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
                raise KubeApiError(409, "conflict")
            stored = copy.deepcopy(lease)
            stored["metadata"]["resourceVersion"] = str(int(lease["metadata"]["resourceVersion"]) + 1)
            self.lease = stored
            self.puts.append(copy.deepcopy(stored))
            return copy.deepcopy(stored)

    def annotations(self) -> dict[str, str]:
        with self.lock:
            return dict(self.lease["metadata"].get("annotations") or {})


def wait_for(check: Any, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_the_holder_writes_its_progress_with_the_acquire_and_the_renewals() -> None:
    stale = Progress("old-plan", 4, 120, 300).to_json()
    server = LeaseServer({"metadata": {"name": "q-driver", "namespace": "ns", "resourceVersion": "7",
                                       "annotations": {HOLDER_PLAN: "old-plan", HOLDER_PROGRESS: stale}},
                          "spec": {"holderIdentity": "", "leaseDurationSeconds": 3, "leaseTransitions": 4,
                                   "renewTime": "2026-05-01T10:00:00.000000Z"}})
    elector = Elector(server, namespace="ns", name="q-driver", identity="q-driver-b/x1",  # type: ignore[arg-type]
                      address=None, plan_hash="new-plan", duration=3.0)
    try:
        leadership = elector.wait_for_leadership(threading.Event())
        assert leadership is not None
        assert (leadership.epoch, leadership.previous_plan) == (5, "old-plan")
        assert leadership.annotations[HOLDER_PROGRESS] == stale  # as found
        acquired = server.puts[0]["metadata"]["annotations"]
        assert Progress.from_json(acquired[HOLDER_PROGRESS]) == Progress("new-plan", 5, 0, 0)

        record = Progress("new-plan", 5, 3, 4).to_json()
        puts = len(server.puts)
        elector.report({HOLDER_PROGRESS: record})
        assert len(server.puts) == puts  # no write of its own
        wait_for(lambda: server.annotations().get(HOLDER_PROGRESS) == record)

        last = Progress("new-plan", 5, 4, 5).to_json()
        elector.report({HOLDER_PROGRESS: last})
        elector.release()  # the last report goes with the release
        assert server.annotations()[HOLDER_PROGRESS] == last
        assert server.lease["spec"]["holderIdentity"] == ""
        elector.report({HOLDER_PROGRESS: "ignored"})  # nothing is reported while not holding
        assert elector._pending == {}
    finally:
        elector.close()


def test_a_hand_off_request_naming_the_holder_itself_is_done_without_a_drain() -> None:
    server = LeaseServer({"metadata": {"name": "q-driver", "namespace": "ns", "resourceVersion": "1"},
                          "spec": {"holderIdentity": "", "leaseDurationSeconds": 3, "leaseTransitions": 0}})
    elector = Elector(server, namespace="ns", name="q-driver", identity="q-driver-a/x1",  # type: ignore[arg-type]
                      address=None, plan_hash="p", duration=3.0)
    try:
        assert elector.wait_for_leadership(threading.Event()) is not None
        with server.lock:  # the operator forwards a hand-off request naming the active pod
            server.lease["metadata"].setdefault("annotations", {})[HANDOFF_REQUEST] = HandoffRequest(
                id="h1", to="q-driver-a").to_json()
            meta = server.lease["metadata"]
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        wait_for(lambda: server.annotations().get(HANDOFF_DONE) == "h1")
        assert not elector.handoff.is_set() and server.lease["spec"]["holderIdentity"] == "q-driver-a/x1"
    finally:
        elector.close()
