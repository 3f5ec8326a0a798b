"""Avro sources and sinks on real PySpark (spark-avro), a real broker and a real schema registry
(Apicurio, Confluent-compatible API): records produced by confluent-kafka's own ``AvroSerializer``,
the output read by its ``AvroDeserializer``. An aggregate from Avro to Avro with exact results (the
at-least-once and the exactly-once sink writing the same bytes); a record written with a newer
compatible writer schema read with the pinned reader schema; malformed records in the dead-letter
topic with their reasons; a schema id the subject did not have when the pipeline was built failing
the batch with the id and the subject, then read after the subject is fetched anew, in a test and
in the runtime process. Nothing skips."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan, RegistrySchema

from tests.support.avro_orders import ORDER_V1, ORDER_V2, orders
from tests.support.registry_fixture import SchemaRegistry, register_avro
from tests.support.runtime import (
    HEADER,
    consume,
    consume_json,
    create_topic,
    produce,
    shared_spark,
    unique,
)

pytestmark = pytest.mark.integration




@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)




def _produce_avro(kafka: str, client: SchemaRegistryClient, topic: str, schema: dict[str, Any],
                  records: list[dict[str, Any]]) -> None:
    serialize = AvroSerializer(client, json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    produce(kafka, topic, [serialize(r, ctx) for r in records])


def _read_avro(kafka: str, client: SchemaRegistryClient, topic: str, expect: int) -> list[dict[str, Any]]:
    deserialize = AvroDeserializer(client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [deserialize(v, ctx) for _, v, _ in consume(kafka, topic, expect=expect)]


def _spec(src: str, sql: str, out: str, *, sink_extra: str = "", source_extra: str = "") -> str:
    return f"""\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {src}
      format: avro
      eventTime: {{column: ts, watermark: 1 minute}}
{source_extra}
  sql: "{sql}"
  sink: {{topic: {out}{sink_extra}}}
"""


def avro_plan(spec: str, *readers: RegistrySchema) -> Plan:
    """The compiler's plan of ``spec`` (``spec:`` YAML), its avro sources pinning ``readers`` (the
    registry's answers the operator passes in)."""
    target = CompileTarget(schemas={r.subject: r for r in readers})
    return compile_query(parse_manifest(HEADER + "spec:\n" + spec).spec, target)


def _run(spark: Any, plan: Plan, kafka: str, checkpoint: Path, avro: Any, query_id: str = "") -> Any:
    from sluice_runtime.pipeline import build_pipeline

    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka,
                          query_id=query_id or unique("q"), available_now=True, avro=avro)
    for q in pipe.all_queries():
        q.awaitTermination(300)
    if pipe.eos_sink is not None:
        pipe.eos_sink.close()
    assert pipe.main.exception() is None
    return pipe


def _settings(registry: SchemaRegistry, sink_id: int | None = None) -> Any:
    from sluice_runtime.avro import AvroSettings, Registry

    return AvroSettings(registry=Registry(registry.url), sink_schema_id=sink_id)


def test_windowed_aggregate_avro_in_avro_out_exact_both_deliveries_same_bytes(
        spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    client = schema_registry.client()
    src = unique("orders")
    create_topic(kafka, src, partitions=2)
    reader = register_avro(client, f"{src}-value", ORDER_V1)
    sent = orders(300)  # 5 minutes of orders, 4 customers
    _produce_avro(kafka, client, src, ORDER_V1, sent)
    sql = ("SELECT window(ts, '1 minute') AS minute, customer, count(*) AS n, sum(amount) AS revenue "
           "FROM orders GROUP BY window(ts, '1 minute'), customer")
    expected: dict[tuple[datetime, str], tuple[datetime, int, float]] = {}
    for o in sent:
        start = o["ts"].replace(second=0)
        n, total = expected.get((start, o["customer"]), (start, 0, 0.0))[1:]
        expected[(start, o["customer"])] = (start + timedelta(minutes=1), n + 1, total + o["amount"])
    assert len(expected) == 20

    written: dict[str, set[tuple[bytes | None, bytes]]] = {}
    for delivery in ("atLeastOnce", "exactlyOnce"):
        out = unique(f"revenue-{delivery.lower()}")
        extra = f", format: avro, key: [customer], delivery: {delivery}, outputMode: update"
        plan = avro_plan(_spec(src, sql, out, sink_extra=extra), reader)
        sink_schema = plan.sink.value_schema
        assert plan.sink.format == "avro" and sink_schema is not None
        assert sink_schema.subject == f"{out}-value"
        sink_id = register_avro(client, sink_schema.subject, sink_schema.schema_).id  # as the operator does
        _run(spark, plan, kafka, tmp_path / delivery, _settings(schema_registry, sink_id))
        raw = consume(kafka, out, expect=20)
        assert {struct.unpack(">bI", v[:5]) for _, v, _ in raw} == {(0, sink_id)}
        rows = _read_avro(kafka, client, out, expect=20)
        final = {(r["minute"]["start"], r["customer"]): (r["minute"]["end"], r["n"], r["revenue"])
                 for r in rows}
        assert final == expected
        assert {k.decode() for k, _, _ in raw if k is not None} == {"c0", "c1", "c2", "c3"}
        # the sink schemas differ per topic (named after it): the Avro bodies are what both agree on
        written[delivery] = {(k, bytes(v[5:])) for k, v, _ in raw}
    assert written["atLeastOnce"] == written["exactlyOnce"]


def test_newer_compatible_writer_schema_is_read_with_the_pinned_reader(
        spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    client = schema_registry.client()
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src)
    reader = register_avro(client, f"{src}-value", ORDER_V1)
    newer = register_avro(client, f"{src}-value", ORDER_V2)
    assert newer.id != reader.id and newer.version == (reader.version or 0) + 1
    _produce_avro(kafka, client, src, ORDER_V1, orders(40))
    _produce_avro(kafka, client, src, ORDER_V2, orders(40, start=40, coupon=True))
    plan = avro_plan(_spec(src, "SELECT order_id, amount, ts FROM orders", out), reader)
    _run(spark, plan, kafka, tmp_path / "c", _settings(schema_registry))
    rows = consume_json(kafka, out, expect=80)
    assert sorted((r["order_id"], r["amount"]) for r in rows) == sorted(
        (o["order_id"], o["amount"]) for o in orders(80))
    assert all(set(r) == {"order_id", "amount", "ts"} for r in rows)


def test_malformed_records_go_to_the_dead_letter_topic_with_their_reason(
        spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    client = schema_registry.client()
    src, out, dlq = unique("orders"), unique("out"), unique("dlq")
    create_topic(kafka, src)
    reader = register_avro(client, f"{src}-value", ORDER_V1)
    _produce_avro(kafka, client, src, ORDER_V1, orders(10))
    assert reader.id is not None
    bad = [b'{"order_id": "json"}', None, struct.pack(">bI", 0, reader.id) + b"\xff\xff\xff"]
    produce(kafka, src, bad)
    block = f"      malformed: {{policy: deadLetter, topic: {dlq}}}"
    plan = avro_plan(_spec(src, "SELECT order_id FROM orders", out, source_extra=block), reader)
    _run(spark, plan, kafka, tmp_path / "d", _settings(schema_registry))
    good = sorted(r["order_id"] for r in consume_json(kafka, out, expect=10))
    assert good == sorted(f"o{i}" for i in range(10))
    letters = consume(kafka, dlq, expect=3)
    reasons = {v: dict(h)["sluice.error"].decode() for _, v, h in letters}
    assert reasons == {
        bad[0]: "record value is not in the Confluent wire format "
                "(magic byte 0, a 4-byte schema id, Avro binary)",
        None: "record value is null",
        bad[2]: f"record value does not decode as Avro written with schema id {reader.id} of subject "
                f"{src}-value, read with the reader schema (version {reader.version}, id {reader.id})",
    }


def test_the_fail_policy_names_the_record_and_its_reason(
        spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    from sluice_runtime.pipeline import build_pipeline

    client = schema_registry.client()
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src)
    reader = register_avro(client, f"{src}-value", ORDER_V1)
    _produce_avro(kafka, client, src, ORDER_V1, orders(3))
    produce(kafka, src, [b"plain text"])
    block = "      malformed: {policy: fail}"
    plan = avro_plan(_spec(src, "SELECT order_id FROM orders", out, source_extra=block), reader)
    pipe = build_pipeline(spark, plan, checkpoint=str(tmp_path / "f"), bootstrap=kafka, query_id=unique("q"),
                          available_now=True, avro=_settings(schema_registry))
    try:
        with pytest.raises(Exception) as failed:
            pipe.main.awaitTermination(300)
    finally:
        for q in pipe.all_queries():
            q.stop()
    assert (f"malformed record in topic {src} partition 0 offset 3 (policy fail): record value is not in "
            "the Confluent wire format") in str(failed.value)


@pytest.mark.parametrize("delivery", ["atLeastOnce", "exactlyOnce"])
def test_unknown_schema_id_fails_naming_it_then_is_read_after_a_refetch(
        spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path, delivery: str) -> None:
    from sluice_runtime.pipeline import build_pipeline, renewed_avro

    client = schema_registry.client()
    src, out = unique("orders"), unique("out")
    subject = f"{src}-value"
    create_topic(kafka, src)
    reader = register_avro(client, subject, ORDER_V1)
    _produce_avro(kafka, client, src, ORDER_V1, orders(20))
    plan = avro_plan(_spec(src, "SELECT order_id FROM orders", out, sink_extra=f", delivery: {delivery}"),
                     reader)
    checkpoint, query_id = tmp_path / "e", unique("q")
    settings = _settings(schema_registry)
    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=query_id,
                          avro=settings)
    try:
        assert len(consume(kafka, out, expect=20, timeout=120)) == 20
        newer = register_avro(client, subject, ORDER_V2)  # after the pipeline was built
        _produce_avro(kafka, client, src, ORDER_V2, orders(1, start=20, coupon=True))
        deadline = time.monotonic() + 120
        while pipe.main.isActive and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not pipe.main.isActive, "the query went on past an unknown schema id"
        failure = str(pipe.main.exception())
        assert "SLUICE_UNKNOWN_SCHEMA_ID" in failure
        assert f"carries schema id {newer.id}, which subject {subject} did not have" in failure
        renewed = renewed_avro(pipe)
        assert renewed is not None and newer.id in renewed.writers[subject]
    finally:
        for q in pipe.all_queries():
            q.stop()
        if pipe.eos_sink is not None:
            pipe.eos_sink.close()
    # the same checkpoint and query identity: the failed batch runs again
    _run(spark, plan, kafka, checkpoint, renewed, query_id=query_id)
    ids = sorted(r["order_id"] for r in consume_json(kafka, out, expect=21))
    if delivery == "exactlyOnce":  # the failed batch's transaction was aborted
        assert ids == sorted(f"o{i}" for i in range(21))
    assert set(ids) == {f"o{i}" for i in range(21)}


# -- the runtime process: the environment the operator sets -------------------------------------
def _process(tmp: Path, plan: Plan, kafka: str, jars: list[Path], env: dict[str, str],
             *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    plan_path = tmp / f"plan-{time.monotonic_ns()}.json"
    plan_path.write_text(plan.to_json())
    log = tmp / f"runtime-{time.monotonic_ns()}.log"
    cmd = [sys.executable, "-m", "sluice_runtime.cli", "run", "--plan", str(plan_path),
           "--checkpoint", str(tmp / "ckpt"), "--bootstrap", kafka, "--query-id", unique("q"),
           "--jars", ",".join(str(j) for j in jars), "--http-addr", "off", *extra]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
                            env={**clean, **env})
    return proc, log


def test_process_refuses_an_avro_sink_without_its_schema_id(
        kafka: str, spark_jars: list[Path], schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    client = schema_registry.client()
    src, out = unique("orders"), unique("out")
    reader = register_avro(client, f"{src}-value", ORDER_V1)
    plan = avro_plan(_spec(src, "SELECT order_id FROM orders", out, sink_extra=", format: avro"), reader)
    env = {"SLUICE_SCHEMA_REGISTRY_URL": schema_registry.url}
    proc, log = _process(tmp_path, plan, kafka, spark_jars, env)
    assert proc.wait(120) == 1
    text = log.read_text()
    assert "not started" in text and "SLUICE_SINK_SCHEMA_ID is not set" in text, text[-2000:]


def test_process_reads_a_new_schema_id_after_fetching_the_subject_again(
        kafka: str, spark_jars: list[Path], schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    client = schema_registry.client()
    src, out = unique("orders"), unique("out")
    subject, out_subject = f"{src}-value", f"{out}-value"
    create_topic(kafka, src)
    create_topic(kafka, out)
    reader = register_avro(client, subject, ORDER_V1)
    _produce_avro(kafka, client, src, ORDER_V1, orders(10))
    sql = "SELECT order_id, amount FROM orders"
    plan = avro_plan(_spec(src, sql, out, sink_extra=", format: avro"), reader)
    assert plan.sink.value_schema is not None
    sink_id = register_avro(client, out_subject, plan.sink.value_schema.schema_).id
    env = {"SLUICE_SCHEMA_REGISTRY_URL": schema_registry.url, "SLUICE_SINK_SCHEMA_ID": str(sink_id)}
    proc, log = _process(tmp_path, plan, kafka, spark_jars, env)
    try:
        def wait_for(n: int) -> list[dict[str, Any]]:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                assert proc.poll() is None, f"runtime exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
                rows = _read_avro(kafka, client, out, expect=0)
                if len(rows) >= n:
                    return rows
                time.sleep(1)
            pytest.fail(f"{n} records did not appear:\n{log.read_text()[-4000:]}")

        wait_for(10)
        newer = register_avro(client, subject, ORDER_V2)
        _produce_avro(kafka, client, src, ORDER_V2, orders(5, start=10, coupon=True))
        rows = wait_for(15)
        assert {r["order_id"] for r in rows} == {f"o{i}" for i in range(15)}
        text = log.read_text()
        assert f"carries schema id {newer.id}, which subject {subject} did not have" in text
        assert "starting the query again" in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(120)
    assert code == 0, log.read_text()[-4000:]


# -- an elected driver (a Lease on a real API server): the refetch while holding the Lease -------
def _kubectl(kube: Any, namespace: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run([str(kube.bin_dir / "kubectl"), *args, "-n", namespace], input=stdin,
                            capture_output=True, text=True, env=kube.env(), timeout=60, check=False)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def _lease_env(kube: Any, namespace: str, tmp: Path, pod: str) -> dict[str, str]:
    """A service account with the driver's Lease and Pod rights (as the operator grants them), its
    token, and the driver's election environment; ``pod`` exists (never scheduled) for its labels."""
    from tests.support.kubetoken import ca_file

    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "driver"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "driver"},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"]},
                   {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "driver"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "driver"},
         "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": namespace}]},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
         "spec": {"containers": [{"name": "driver", "image": "sluice-runtime:test"}],
                  "nodeSelector": {"sluice.dev/no-such-node": "true"}}},
    ]
    for obj in objects:
        _kubectl(kube, namespace, "apply", "-f", "-", stdin=json.dumps(obj))
    token = tmp / "token"
    token.write_text(_kubectl(kube, namespace, "create", "token", "driver", "--duration", "1h").strip())
    return {"SLUICE_KUBE_SERVER": kube.server, "SLUICE_KUBE_TOKEN_FILE": str(token),
            "SLUICE_KUBE_CA_FILE": str(ca_file(kube, tmp)), "SLUICE_LEASE_NAME": "q-driver",
            "SLUICE_LEASE_NAMESPACE": namespace, "SLUICE_LEASE_SECONDS": "5", "SLUICE_POD_NAME": pod}


def test_elected_driver_reads_a_new_schema_id_without_giving_up_its_lease(
        kube: Any, namespace: str, kafka: str, spark_jars: list[Path], schema_registry: SchemaRegistry,
        tmp_path: Path) -> None:
    client = schema_registry.client()
    src, out = unique("orders"), unique("out")
    subject = f"{src}-value"
    create_topic(kafka, src)
    create_topic(kafka, out)
    reader = register_avro(client, subject, ORDER_V1)
    _produce_avro(kafka, client, src, ORDER_V1, orders(10))
    spec = _spec(src, "SELECT order_id FROM orders", out, sink_extra=", delivery: exactlyOnce")
    plan = avro_plan(spec, reader)
    env = {"SLUICE_SCHEMA_REGISTRY_URL": schema_registry.url,
           **_lease_env(kube, namespace, tmp_path, "driver-0")}
    proc, log = _process(tmp_path, plan, kafka, spark_jars, env)
    try:
        def wait_for(n: int) -> list[str]:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                assert proc.poll() is None, f"runtime exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
                ids = [r["order_id"] for r in consume_json(kafka, out, expect=0)]
                if len(ids) >= n:
                    return ids
                time.sleep(1)
            pytest.fail(f"{n} records did not appear:\n{log.read_text()[-4000:]}")

        wait_for(10)
        newer = register_avro(client, subject, ORDER_V2)
        _produce_avro(kafka, client, src, ORDER_V2, orders(5, start=10, coupon=True))
        ids = wait_for(15)
        assert sorted(ids) == sorted(f"o{i}" for i in range(15))  # exactly once, read_committed
        text = log.read_text()
        assert f"carries schema id {newer.id}, which subject {subject} did not have" in text
        assert "active: a source subject has new schema ids; the query starts again" in text
        assert "active: took over" in text and text.count("active: took over") == 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(120)
    assert code == 0, log.read_text()[-4000:]
