"""The runtime's checkpoints in an object store, for real: s3proxy through S3A's own SDK client in
a driver's JVM (``sluice_runtime.checkpointstore``), checkpoint epochs made by claim and
server-side copy (``sluice_runtime.epochs``), and a runtime process with an exactly-once,
stateful plan on an ``s3a://`` checkpoint, drained by SIGTERM and started again.

The store and epoch scenarios run in a spawned process with a JVM of its own (the S3A jars must be
on its class path when it starts), configured only from the environment the operator sets
(``SLUICE_S3_*``, ``AWS_*``) through ``sluice_runtime.config.object_store_conf``: the settings a
driver derives are the ones tested. Nothing skips: a store that cannot start fails the tests."""

from __future__ import annotations

import collections
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sluice_runtime import epochs

from tests.integration.conftest import ObjectStore
from tests.support.runtime import consume, create_topic, free_port, plan_from_yaml, produce, unique

pytestmark = pytest.mark.integration

CUSTOMERS = ("c0", "c1", "c2")


def s3_env(store: ObjectStore) -> dict[str, str]:
    """The environment the operator gives a driver with a checkpoint in this store."""
    from sluice_dev.platform import objectstore as component

    return {
        "SLUICE_S3_ENDPOINT": store.endpoint,
        "SLUICE_S3_PATH_STYLE": "true",
        "SLUICE_S3_REGION": component.REGION,
        "AWS_ACCESS_KEY_ID": store.access_key,
        "AWS_SECRET_ACCESS_KEY": store.secret_key,
    }


# --- in the spawned process: a JVM with the S3A jars, no SparkContext --------------------------

_GATEWAY: list[Any] = []


def _start_jvm(jars: list[str], env: dict[str, str], bucket: str) -> None:
    os.environ.update(env)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(jars)} pyspark-shell"
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway
    from sluice_runtime import checkpointstore as cs
    from sluice_runtime.config import object_store_conf

    gateway = launch_gateway(SparkConf(loadDefaults=False))
    _GATEWAY.append(gateway)  # the JVM lives as long as its gateway object (its stdin pipe)
    conf = gateway.jvm.org.apache.hadoop.conf.Configuration()
    for key, value in object_store_conf(f"s3a://{bucket}/x", env).items():
        if key.startswith("spark.hadoop."):
            conf.set(key.removeprefix("spark.hadoop."), value)
    cs.use_store(cs.S3Store(gateway.jvm, conf))


def _guarded(scenario: Any, *args: Any) -> Any:
    try:
        return scenario(*args)
    except Exception as exc:  # py4j errors do not pickle: hand the parent their text
        import traceback

        raise RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}") from None


def _store_scenario(base: str) -> dict[str, Any]:
    from sluice_runtime import checkpointstore as cs

    store = cs.store_for(base)
    out: dict[str, Any] = {}
    claim = cs.join(base, "claim")
    out["first_create"] = store.create_if_absent(claim, b"one")
    out["second_create"] = store.create_if_absent(claim, b"two")
    out["claim"] = store.read(claim)
    out["missing"] = store.read(cs.join(base, "nothing"))
    store.write(cs.join(base, "a", "offsets", "0"), b"v1\n{}")
    store.write(cs.join(base, "a", "offsets", "1"), b"v1\n{}\n")
    store.write(cs.join(base, "a", "state", "0", "0", "1.zip"), b"z" * 1000)
    store.write(cs.join(base, "a-sibling", "keep"), b"k")
    out["copied"] = store.copy(cs.join(base, "a", "state", "0", "0", "1.zip"), cs.join(base, "b", "1.zip"))
    out["copied_gone"] = store.copy(cs.join(base, "a", "gone"), cs.join(base, "b", "gone"))
    out["copy_body"] = store.read(cs.join(base, "b", "1.zip"))
    out["listing"] = [(e.key, e.size) for e in store.listing(cs.join(base, "a"))]
    out["names"] = store.names(base)
    out["names_offsets"] = store.names(cs.join(base, "a", "offsets"))
    out["size"] = store.size(cs.join(base, "a"))
    out["exists"] = (store.exists(cs.join(base, "a", "offsets", "0")), store.exists(cs.join(base, "a", "x")))
    out["mtime"] = store.mtime(cs.join(base, "a", "offsets", "0"))
    store.delete(cs.join(base, "a", "offsets", "1"))
    store.delete(cs.join(base, "a", "offsets", "9"))  # missing: fine
    out["after_delete"] = store.names(cs.join(base, "a", "offsets"))
    store.delete_prefix(cs.join(base, "a"))
    out["after_delete_prefix"] = store.listing(cs.join(base, "a")) == []
    out["sibling_kept"] = store.read(cs.join(base, "a-sibling", "keep"))
    return out


def _multipart_scenario(base: str) -> dict[str, Any]:
    """A copy above the (lowered) threshold goes in parts of byte ranges; a failed part aborts
    the upload and leaves nothing."""
    from sluice_runtime import checkpointstore as cs

    default = cs.store_for(base)
    assert isinstance(default, cs.S3Store)
    mib = 1024 * 1024
    store = cs.S3Store(default._jvm, default._conf, multipart_threshold=6 * mib, multipart_part_size=5 * mib)
    body = bytes(range(256)) * (13 * mib // 256) + b"tail"
    store.write(cs.join(base, "big"), body)
    out: dict[str, Any] = {"parts": len(cs.copy_ranges(len(body), 5 * mib))}
    out["copied"] = store.copy(cs.join(base, "big"), cs.join(base, "copy"), size=len(body))
    out["same"] = store.read(cs.join(base, "copy")) == body
    out["gone"] = store.copy(cs.join(base, "nothing"), cs.join(base, "copy2"), size=len(body))
    out["small"] = store.copy(cs.join(base, "big"), cs.join(base, "copy3"), size=5)  # one CopyObject
    out["small_same"] = store.read(cs.join(base, "copy3")) == body
    out["keys"] = sorted(store.names(base))
    return out


def _epochs_scenario(base: str) -> dict[str, Any]:
    from sluice.core.driverreport import Backstop
    from sluice_runtime import checkpointstore as cs
    from sluice_runtime import epochs

    store = cs.store_for(base)
    out: dict[str, Any] = {}
    one, source, _ = epochs.prepare_object_store(base, 1, holder="driver-a/1")
    out["one"], out["one_source"] = one, source
    for key, body in (("metadata", b'{"id":"q"}'), ("offsets/0", b"v1\n{}\n{}"), ("commits/0", b"v1\n{}"),
                      ("state/0/0/1.zip", b"s" * 5000), ("sources/0/0", b"v1\n{}")):
        store.write(cs.join(one, key), body)
    two, source, made = epochs.prepare_object_store(base, 2, holder="driver-b/1")
    out["two_source"], out["made"] = source, (made.objects, made.size) if made else None
    # the zombie of term 1 goes on writing into its own epoch
    store.write(cs.join(one, "offsets/1"), b"v1\n{}\n{}")
    store.write(cs.join(one, "commits/1"), b"v1\n{}")
    store.delete(cs.join(one, "commits/0"))
    out["two_keys"] = sorted(e.key for e in store.listing(two))
    out["last_commit_two"] = epochs.last_commit_time(two)
    try:
        epochs.prepare_object_store(base, 2, holder="driver-c/1")
        out["taken"] = None
    except epochs.TermTaken as exc:
        out["taken"] = str(exc)
    again, source, made = epochs.prepare_object_store(base, 2, holder="driver-b/1")
    out["again"] = (again == two, source, made)
    # a term claimed whose copy never finished (its driver died): never a source
    store.create_if_absent(cs.join(base, "epochs", "3", epochs.TERM), epochs.term_record(3, "driver-d/1", ""))
    out["epochs"] = epochs.epochs(base)
    out["source_of_4"] = epochs.source_of(base, 4)
    epochs.keep_backstop(base, Backstop(2, "p2", "p3", "2026-11-27T10:00:00Z"))
    out["backstops"] = [b.epoch for b in epochs.backstops(base)]
    four, _, _ = epochs.prepare_object_store(base, 4, holder="driver-e/1")
    epochs.prepare_object_store(base, 5, holder="driver-f/1")
    out["pruned"] = epochs.prune(base, 5)
    out["after_prune"] = epochs.epochs(base)
    out["one_left"] = store.listing(one)
    out["four_keys"] = sorted(e.key for e in store.listing(four))
    return out


def _measure_copy(base: str, epoch: int) -> dict[str, Any]:
    from sluice_runtime import checkpointstore as cs
    from sluice_runtime import epochs

    source_keys = sorted(e.key for e in cs.store_for(base).listing(base))
    target, source, made = epochs.prepare_object_store(base, epoch, holder="measure/1")
    assert made is not None
    copied = sorted(e.key for e in cs.store_for(base).listing(target))
    return {"source": source, "objects": made.objects, "bytes": made.size, "list_s": made.list_seconds,
            "copy_s": made.copy_seconds, "source_keys": source_keys, "copied": copied}


def _call(name: str, *args: Any) -> Any:
    return _guarded(globals()[name], *args)


# --- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jvm(objectstore: ObjectStore, s3a_jars: list[Path]) -> Iterator[ProcessPoolExecutor]:
    """One spawned process holding a JVM with the S3A jars, its store set from the environment."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_start_jvm,
                             initargs=([str(p) for p in s3a_jars], s3_env(objectstore),
                                       objectstore.bucket)) as pool:
        yield pool


def run_in(pool: ProcessPoolExecutor, name: str, *args: Any) -> Any:
    return pool.submit(_call, name, *args).result(timeout=300)


# --- (a) the store ------------------------------------------------------------------------------

def test_the_store_against_s3proxy(jvm: ProcessPoolExecutor, objectstore: ObjectStore) -> None:
    base = f"s3a://{objectstore.bucket}/store-{uuid.uuid4().hex[:8]}"
    out = run_in(jvm, "_store_scenario", base)
    assert out["first_create"] is True
    assert out["second_create"] is False, "a conditional create of an existing key must be refused"
    assert out["claim"] == b"one" and out["missing"] is None
    assert out["copied"] is True and out["copy_body"] == b"z" * 1000
    assert out["copied_gone"] is False
    assert out["listing"] == [("offsets/0", 5), ("offsets/1", 6), ("state/0/0/1.zip", 1000)]
    assert out["names"] == ["a", "a-sibling", "b", "claim"]
    assert out["names_offsets"] == ["0", "1"]
    assert out["size"] == 1011
    assert out["exists"] == (True, False)
    assert abs(out["mtime"] - time.time()) < 120
    assert out["after_delete"] == ["0"]
    assert out["after_delete_prefix"] is True
    assert out["sibling_kept"] == b"k"  # a prefix is a directory: "a" does not take "a-sibling"


def test_a_large_object_is_copied_in_parts(jvm: ProcessPoolExecutor, objectstore: ObjectStore) -> None:
    base = f"s3a://{objectstore.bucket}/multipart-{uuid.uuid4().hex[:8]}"
    out = run_in(jvm, "_multipart_scenario", base)
    assert out["parts"] == 3
    assert out["copied"] is True and out["same"] is True
    assert out["gone"] is False  # a source purged since the listing: skipped, as a single copy is
    assert out["small"] is True and out["small_same"] is True
    assert out["keys"] == ["big", "copy", "copy3"]  # nothing left of the failed upload


# --- (b) epochs on the object store -------------------------------------------------------------

def test_epochs_on_the_object_store_fence_a_zombie_and_refuse_a_second_claim(
        jvm: ProcessPoolExecutor, objectstore: ObjectStore) -> None:
    base = f"s3a://{objectstore.bucket}/epochs-{uuid.uuid4().hex[:8]}/q-v1"
    out = run_in(jvm, "_epochs_scenario", base)
    assert out["one"] == f"{base}/epochs/1" and out["one_source"] is None  # a new query
    assert out["two_source"] == f"{base}/epochs/1"
    assert out["made"] == (5, 10 + 8 + 5 + 5000 + 5)  # the five objects, their bytes
    # the zombie's batch 1 and its deletion of commits/0 are not in term 2's epoch
    assert out["two_keys"] == ["_ready", "_term", "commits/0", "metadata", "offsets/0", "sources/0/0",
                               "state/0/0/1.zip"]
    assert out["last_commit_two"] is not None and out["last_commit_two"][0] == 0
    assert out["taken"] is not None and "driver-b/1" in out["taken"], out["taken"]
    assert out["again"] == (True, f"{base}/epochs/1", None)  # the same holder again: idempotent
    assert out["epochs"] == [1, 2, 3]
    assert out["source_of_4"] == f"{base}/epochs/2"  # epoch 3 never became ready
    assert out["backstops"] == [2]
    # prune at 5: keeps 4 (just behind) and 2 (a backstop); 1 and the unfinished 3 go
    assert out["pruned"] == [1, 3] and out["after_prune"] == [2, 4, 5]
    assert out["one_left"] == []
    assert "commits/0" in out["four_keys"] and "commits/1" not in out["four_keys"]


# --- (c) a runtime process on an s3a:// checkpoint ---------------------------------------------

def _spec(src: str, out: str) -> str:
    return f"""\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {src}
      maxOffsetsPerTrigger: 100
      schema:
        - {{name: order_id, type: string}}
        - {{name: customer, type: string}}
  sql: SELECT customer, count(*) AS n FROM orders GROUP BY customer
  sink: {{topic: {out}, delivery: exactlyOnce, outputMode: update}}
"""


class Runtime:
    def __init__(self, tmp: Path, plan: Path, checkpoint: str, kafka: str, jars: list[Path], query_id: str,
                 env: dict[str, str], *extra: str) -> None:
        self.port = free_port()
        self.log = tmp / f"runtime-{time.monotonic_ns()}.log"
        cmd = [sys.executable, "-m", "sluice_runtime.cli", "run", "--plan", str(plan),
               "--checkpoint", checkpoint, "--bootstrap", kafka, "--query-id", query_id,
               "--jars", ",".join(str(j) for j in jars),
               "--http-addr", f"127.0.0.1:{self.port}", *extra]
        # as in a pod: no PYSPARK_SUBMIT_ARGS (the test session's names the Kafka jars only, and its
        # --jars would replace the spark.jars the runtime derives from --jars)
        inherited = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**inherited, **env})

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            pytest.fail(f"runtime did not exit in {timeout}s; log:\n{self.tail()}")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self) -> str:
        return self.text()[-6000:]


def _orders(start: int, count: int) -> list[dict[str, Any]]:
    return [{"order_id": f"o{i}", "customer": CUSTOMERS[i % 3]} for i in range(start, start + count)]


def _updates(kafka: str, topic: str, expect: int | None = None) -> list[tuple[str, int]]:
    rows = [json.loads(v) for _, v, _ in consume(kafka, topic, committed_only=True, expect=expect)]
    return [(str(r["customer"]), int(r["n"])) for r in rows]


def test_a_runtime_on_an_s3a_checkpoint_drains_and_resumes_exactly_once_with_its_state(
        objectstore: ObjectStore, kafka: str, spark_jars: list[Path], s3a_jars: list[Path],
        jvm: ProcessPoolExecutor, tmp_path: Path) -> None:
    src, out = unique("orders"), unique("counts")
    create_topic(kafka, src, partitions=2)
    create_topic(kafka, out)
    produce(kafka, src, _orders(0, 600))
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan_from_yaml(_spec(src, out)).to_json())
    prefix = f"checkpoints/rt-{uuid.uuid4().hex[:8]}/q-v1"
    checkpoint = f"s3a://{objectstore.bucket}/{prefix}"
    jars, env, qid = [*spark_jars, *s3a_jars], s3_env(objectstore), unique("q")

    first = Runtime(tmp_path, plan_path, checkpoint, kafka, jars, qid, env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # a few committed batches (100 records each) in the store
        if first.proc.poll() is not None:
            pytest.fail(f"runtime exited early ({first.proc.returncode}); log:\n{first.tail()}")
        commits = [k for k in objectstore.client.keys(objectstore.bucket, f"{prefix}/commits/")
                   if k.rpartition("/")[2].isdigit()]
        if len(commits) >= 2:
            break
        time.sleep(1)
    else:
        pytest.fail(f"no commits in the store after 240s; log:\n{first.tail()}")
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait() == 0, first.tail()
    # the whole log: on a slow machine the shutdown's own noise (an S3 client's stack trace) can
    # push the drain's lines out of the tail
    assert "drain" in first.text(), first.tail()
    keys = set(objectstore.client.keys(objectstore.bucket, f"{prefix}/"))
    commits = sorted(int(k.rpartition("/")[2]) for k in keys
                     if k.startswith(f"{prefix}/commits/") and k.rpartition("/")[2].isdigit())
    offsets = sorted(int(k.rpartition("/")[2]) for k in keys
                     if k.startswith(f"{prefix}/offsets/") and k.rpartition("/")[2].isdigit())
    assert commits and offsets[-1] == commits[-1], (commits, offsets)  # the drain ended on a commit
    assert f"{prefix}/metadata" in keys and any(k.startswith(f"{prefix}/state/") for k in keys)

    produce(kafka, src, _orders(600, 600))
    second = Runtime(tmp_path, plan_path, checkpoint, kafka, jars, qid, env, "--available-now")
    assert second.wait() == 0, second.tail()

    updates = _updates(kafka, out)
    by_customer: dict[str, list[int]] = collections.defaultdict(list)
    for customer, n in updates:
        by_customer[customer].append(n)
    # state kept across the restart and nothing lost: every customer counts all of its 400 orders;
    # nothing written twice: each batch's update of a customer appears once, counts only grow
    assert {c: max(ns) for c, ns in by_customer.items()} == {c: 400 for c in CUSTOMERS}, updates
    for customer, ns in by_customer.items():
        assert ns == sorted(set(ns)), (customer, ns)

    # the copy of this checkpoint into a first epoch, as an elected driver would make it: measured
    measured = run_in(jvm, "_measure_copy", checkpoint, 1)
    assert measured["source"] == checkpoint
    expected = epochs.copy_plan([k for k in measured["source_keys"] if not k.startswith("epochs/")],
                                from_base=True)
    assert measured["copied"] == sorted([*expected, "_ready", "_term"])
    # the metadata logs' newest entries only (the query ran more batches than that)
    assert len([k for k in measured["copied"] if k.startswith("commits/")]) == epochs.LOG_ENTRIES_COPIED
    assert len([k for k in measured["source_keys"] if k.startswith("commits/")]) > epochs.LOG_ENTRIES_COPIED
    print(f"epoch copy of the test's checkpoint: {measured['objects']} objects, {measured['bytes']} bytes: "
          f"listed in {measured['list_s']:.3f}s, copied in {measured['copy_s']:.3f}s")


# --- the plan warm-up of a standby on an s3a:// checkpoint --------------------------------------

def _warm_up(jars: list[str], env: dict[str, str], kafka: str, plan_json: str, checkpoint: str) -> list[str]:
    """In a spawned process: a SparkSession as a driver makes it for an s3a:// checkpoint, the plan's
    warm-up, and what the warm-up logged as a warning."""
    import logging

    os.environ.update(env)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(jars)} pyspark-shell"
    from pyspark.sql import SparkSession
    from sluice.core.plan.model import Plan
    from sluice_runtime.config import object_store_conf
    from sluice_runtime.pipeline import prepare_pipeline

    warnings: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger("sluice_runtime").addHandler(Keep(logging.WARNING))
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    for key, value in object_store_conf(checkpoint, env).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        prepare_pipeline(spark, Plan.model_validate_json(plan_json), bootstrap=kafka, query_id=unique("warm"),
                         warm_up="plan", checkpoint=checkpoint)
    finally:
        spark.stop()
    return warnings


def test_a_standby_warms_up_on_the_plan_beside_an_s3a_checkpoint_and_leaves_nothing(
        objectstore: ObjectStore, s3a_jars: list[Path], spark_jars: list[Path], kafka: str) -> None:
    """The abortable-stream checkpoint manager an s3a:// checkpoint needs refuses a local path, so
    the warm-up's scratch checkpoint goes beside the query's (``<base>/warm-up/<random>``), and is
    removed afterwards."""
    src, out = unique("warm-src"), unique("warm-out")
    create_topic(kafka, src)
    create_topic(kafka, out)
    produce(kafka, src, [{"customer": f"c{i % 3}"} for i in range(30)])
    plan = plan_from_yaml(f"""\
  sources: [{{name: orders, topic: {src}, schema: [{{name: customer, type: string}}]}}]
  sql: "SELECT customer, count(*) AS n FROM orders GROUP BY customer"
  sink: {{topic: {out}, outputMode: update, delivery: exactlyOnce}}
""")
    prefix = f"warm-{uuid.uuid4().hex[:8]}"
    checkpoint = f"s3a://{objectstore.bucket}/{prefix}"
    jars = [str(p) for p in [*spark_jars, *s3a_jars]]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        warnings = pool.submit(_warm_up, jars, s3_env(objectstore), kafka,
                               plan.model_dump_json(by_alias=True), checkpoint).result(timeout=300)
    assert not [w for w in warnings if "warm-up" in w], warnings
    assert list(objectstore.client.keys(objectstore.bucket, f"{prefix}/")) == []
