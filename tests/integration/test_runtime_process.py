"""The runtime as a process (``python -m sluice_runtime.cli run``), as a pod runs it: kill -9 in
the middle of a stream and restart on the same checkpoint, graceful drain on SIGTERM, the HTTP
endpoint, and ``sluice run`` on a manifest."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.runtime import consume, create_topic, free_port, plan_from_yaml, produce, ts, unique

pytestmark = pytest.mark.integration

TOTAL = 3000


def _spec(src: str, out: str, delivery: str) -> str:
    return f"""\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {src}
      maxOffsetsPerTrigger: 150
      schema:
        - {{name: order_id, type: string}}
        - {{name: amount, type: double}}
        - {{name: ts, type: timestamp}}
  sql: SELECT order_id, amount FROM orders WHERE amount >= 0
  sink: {{topic: {out}, delivery: {delivery}}}
"""


class Runtime:
    def __init__(
        self,
        tmp: Path,
        plan_path: Path,
        checkpoint: Path,
        kafka: str,
        jars: list[Path],
        query_id: str,
        *extra: str,
    ) -> None:
        self.port = free_port()
        self.log = tmp / f"runtime-{time.monotonic_ns()}.log"
        cmd = [
            sys.executable,
            "-m",
            "sluice_runtime.cli",
            "run",
            "--plan",
            str(plan_path),
            "--checkpoint",
            str(checkpoint),
            "--bootstrap",
            kafka,
            "--query-id",
            query_id,
            "--jars",
            ",".join(str(j) for j in jars),
            "--http-addr",
            f"127.0.0.1:{self.port}",
            *extra,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"runtime did not exit in {timeout}s; log:\n{self.tail()}")

    def kill(self) -> None:
        """kill -9 of the whole runtime (Python driver and its JVM), as when a pod dies."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def signal_all(self, sig: int) -> None:
        """``sig`` to the runtime's process group and to its JVM's, which runs in a session of its
        own (``sluice_runtime.session``): freezing a driver must freeze the JVM too, or its
        streaming queries go on planning batches into the checkpoint."""
        groups = {self.proc.pid}
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                groups.add(os.getpgid(int(child)))
        for group in groups:
            os.killpg(group, sig)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _setup(kafka: str, tmp_path: Path, delivery: str) -> tuple[Path, str, list[str]]:
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src, partitions=2)
    create_topic(kafka, out)
    ids = [f"o{i}" for i in range(TOTAL)]
    produce(
        kafka, src, [{"order_id": oid, "amount": float(i % 9), "ts": ts(i / 60)} for i, oid in enumerate(ids)]
    )
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan_from_yaml(_spec(src, out, delivery)).to_json())
    return plan_path, out, ids


def _wait_output(kafka: str, topic: str, at_least: int, rt: Runtime, timeout: float = 240) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka, "group.id": unique("w")})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if rt.proc.poll() is not None:
                pytest.fail(f"runtime exited early ({rt.proc.returncode}); log:\n{rt.tail()}")
            _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if high >= at_least:
                return
            time.sleep(0.5)
    finally:
        c.close()
    pytest.fail(f"no output on {topic} after {timeout}s; log:\n{rt.tail()}")


def test_kill_9_then_restart(kafka: str, spark_jars: list[Path], tmp_path: Path) -> None:
    """At-least-once: every record after the restart, none lost (exactly-once after kill -9 is
    tested through a pod, ``tests/e2e/test_queries.py``)."""
    plan_path, out, ids = _setup(kafka, tmp_path, "atLeastOnce")
    ck, qid = tmp_path / "ck", unique("q")
    rt = Runtime(tmp_path, plan_path, ck, kafka, spark_jars, qid)
    _wait_output(kafka, out, 450, rt)
    rt.kill()
    again = Runtime(tmp_path, plan_path, ck, kafka, spark_jars, qid, "--available-now")
    assert again.wait() == 0, again.tail()
    got = [v for _, v, _ in consume(kafka, out, expect=TOTAL, committed_only=True)]
    import json

    seen = collections.Counter(json.loads(v)["order_id"] for v in got)
    assert set(seen) == set(ids), "records lost"


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of the sample lines of metric ``name`` in a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return [(dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples if s.name == name]


def test_drain_on_sigterm(kafka: str, spark_jars: list[Path], tmp_path: Path) -> None:
    from sluice.core.plan.model import KafkaSourceV1, Plan
    from sluice_runtime.drain import last_commit, last_offsets
    from sluice_runtime.pipeline import query_name

    plan_path, out, ids = _setup(kafka, tmp_path, "atLeastOnce")
    ck, qid = tmp_path / "ck", unique("q")
    rt = Runtime(tmp_path, plan_path, ck, kafka, spark_jars, qid)
    _wait_output(kafka, out, 450, rt)
    assert rt.get("/healthz")[0] == 200
    deadline = time.monotonic() + 60
    while rt.get("/readyz")[0] != 200 and time.monotonic() < deadline:
        time.sleep(1)
    code, body = rt.get("/readyz")
    pinned = Plan.from_json(plan_path.read_bytes())
    plan_hash = pinned.hash or pinned.compute_hash()
    assert code == 200 and body.startswith("ok") and f"plan {plan_hash[:12]}" in body, body  # names its plan
    query = query_name(qid)

    def last_committed() -> tuple[float, str]:
        """The query's last committed batch id; -1 while its first progress report has not reached
        the metrics yet (the sample appears with it)."""
        code, metrics = rt.get("/metrics")
        assert code == 200, metrics
        values = [v for labels, v in _samples(metrics, "sluice_last_committed_batch_id")
                  if labels["query"] == query]
        assert len(values) <= 1, metrics
        return (values[0] if values else -1.0), metrics

    # the sample lines, not just the # HELP lines: output >= 450 records at 150 per batch means
    # batches 0..2 ran, so batch 1 had committed before batch 2 wrote; its progress report reaches
    # the metrics through Spark's asynchronous listener bus, a little later on a loaded machine
    committed, metrics = last_committed()
    deadline = time.monotonic() + 60
    while committed < 1 and time.monotonic() < deadline:
        time.sleep(1)
        committed, metrics = last_committed()
    assert committed >= 1 and committed == int(committed), metrics
    lags = {(labels["topic"], labels["partition"]): v
            for labels, v in _samples(metrics, "sluice_kafka_lag_records") if labels["query"] == query}
    (src,) = {s.topic for s in Plan.from_json(plan_path.read_bytes()).steps if isinstance(s, KafkaSourceV1)}
    assert set(lags) == {(src, "0"), (src, "1")}, metrics
    assert all(0 <= v <= TOTAL for v in lags.values()) and sum(lags.values()) < TOTAL, lags
    rt.proc.send_signal(signal.SIGTERM)
    assert rt.wait(180) == 0, rt.tail()
    last = last_offsets(ck)
    assert last is not None and last == last_commit(ck), "the last offsets/N has no commits/N"
    assert last >= committed, "the drained checkpoint ends before a batch the metrics reported committed"
    before = len(consume(kafka, out, committed_only=False, expect=1))
    again = Runtime(tmp_path, plan_path, ck, kafka, spark_jars, qid, "--available-now")
    assert again.wait() == 0, again.tail()
    import json

    got = [json.loads(v)["order_id"] for _, v, _ in consume(kafka, out, committed_only=False, expect=TOTAL)]
    seen = collections.Counter(got)
    assert before < TOTAL, "drain came too late to test anything"
    assert set(seen) == set(ids) and max(seen.values()) == 1, "a drained query reprocessed records"


def test_sluice_run_manifest(kafka: str, spark_jars: list[Path], tmp_path: Path) -> None:
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src)
    produce(kafka, src, [{"order_id": f"o{i}", "amount": float(i), "ts": ts(i)} for i in range(10)])
    manifest = tmp_path / "q.yaml"
    manifest.write_text(
        "apiVersion: sluice.dev/v1alpha1\nkind: StreamingQuery\nmetadata: {name: q, namespace: t}\nspec:\n"
        + _spec(src, out, "atLeastOnce").replace("WHERE amount >= 0", "WHERE amount >= 5")
    )
    cmd = [
        sys.executable,
        "-m",
        "sluice.commands.run",
        str(manifest),
        "--bootstrap",
        kafka,
        "--checkpoint",
        str(tmp_path / "ck"),
        "--available-now",
        "--jars",
        ",".join(str(j) for j in spark_jars),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    got = sorted(json.loads(v)["order_id"] for _, v, _ in consume(kafka, out, expect=5))
    assert got == sorted(f"o{i}" for i in range(5, 10))


def test_exactly_once_zombie_is_fenced(kafka: str, spark_jars: list[Path], tmp_path: Path) -> None:
    """A driver frozen mid-stream (GC pause, partition) while a new one takes over the same query
    identity and checkpoint: after it wakes up it is fenced and nothing it writes becomes visible."""
    import json

    plan_path, out, ids = _setup(kafka, tmp_path, "exactlyOnce")
    ck, qid = tmp_path / "ck", unique("q")
    zombie = Runtime(tmp_path, plan_path, ck, kafka, spark_jars, qid)
    _wait_output(kafka, out, 450, zombie)
    zombie.signal_all(signal.SIGSTOP)
    try:
        successor = Runtime(tmp_path, plan_path, ck, kafka, spark_jars, qid, "--available-now")
        assert successor.wait() == 0, successor.tail()
    finally:
        zombie.signal_all(signal.SIGCONT)
    try:
        code = zombie.proc.wait(120)
        assert code != 0, "the zombie went on as if nothing happened"
    except subprocess.TimeoutExpired:
        pass  # still trying: whatever it does, its writes must stay invisible
    time.sleep(5)
    zombie.kill()
    got = [json.loads(v)["order_id"] for _, v, _ in consume(kafka, out, committed_only=True, expect=TOTAL)]
    seen = collections.Counter(got)
    assert set(seen) == set(ids), "records lost"
    assert max(seen.values()) == 1, "a write of the fenced driver became visible"
