"""End to end: Avro in and out through driver pods, with a real schema registry.

Apicurio Registry (the platform's, Confluent-compatible API, global compatibility BACKWARD) on the
node's address, where the pods reach it; the QueryCluster's ``spec.schemaRegistry``. Records are
written by confluent-kafka's own ``AvroSerializer`` (registering ``<topic>-value``) and the output
read by its ``AvroDeserializer``:

* a windowed aggregate from Avro to Avro (``update``, keyed by customer) with exact results; the
  operator registered the sink schema under ``<sink>-value`` and the records carry its id;
* the source subject gains a version mid-stream (a field added with a default): its records are
  read with the pinned reader schema, by the same driver (no restart, the plan unchanged);
* a stateless avro query: an output change the registry calls incompatible (``double`` ->
  ``string``) is refused at ``kubectl apply`` with the registry's reason; a compatible one (a new
  column, nullable with a default) is carried out in place.

``E2E_CLUSTER=kind`` needs a registry reachable from the pods and the tests:
``E2E_SCHEMA_REGISTRY_URL``.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from cluster import E2ECluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sluice_dev.platform import common
from sluice_dev.platform import registry as component
from test_queries import READY_TIMEOUT, cluster_doc, create_topics, query_doc, wait_ready

from tests.support import avro_orders
from tests.support.avro_orders import orders

pytestmark = pytest.mark.e2e


ORDER_V1, ORDER_V2 = json.dumps(avro_orders.ORDER_V1), json.dumps(avro_orders.ORDER_V2)
REVENUE_SQL = ("SELECT window(ts, '1 minute') AS minute, customer, count(*) AS n, sum(amount) AS revenue "
               "FROM orders GROUP BY window(ts, '1 minute'), customer")
ITEMS_SQL = "SELECT order_id, amount FROM orders"


@pytest.fixture(scope="module")
def registry_url(cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The schema registry the pods use: on the node's address (where Kafka's pod listener is), or
    ``E2E_SCHEMA_REGISTRY_URL`` on kind."""
    if cluster.kind == "kind":
        url = os.environ.get("E2E_SCHEMA_REGISTRY_URL")
        if not url:
            pytest.fail("E2E_CLUSTER=kind: the Avro tests need E2E_SCHEMA_REGISTRY_URL", pytrace=False)
        yield url
        return
    state = tmp_path_factory.mktemp("e2e-registry")
    try:
        started = component.start(state, pod_address=cluster.bootstrap.rsplit(":", 1)[0])
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield started.env["SLUICE_SCHEMA_REGISTRY_URL"]
    finally:
        component.stop(state)


def produce_avro(bootstrap: str, client: SchemaRegistryClient, topic: str, schema: str,
                 records: list[dict[str, Any]]) -> None:
    serialize = AvroSerializer(client, schema)  # registers <topic>-value, as a producer does
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for rec in records:
        producer.produce(topic, value=serialize(rec, ctx))
    producer.flush(30)


class AvroOutput:
    """Every record of a topic so far, as written (value bytes) and as Avro (AvroDeserializer)."""

    def __init__(self, bootstrap: str, client: SchemaRegistryClient, topic: str) -> None:
        self.topic, self.rows, self.raw = topic, list[dict[str, Any]](), list[bytes]()
        self.deserialize = AvroDeserializer(client)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{topic}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([topic])

    def poll(self) -> list[dict[str, Any]]:
        ctx = SerializationContext(self.topic, MessageField.VALUE)
        for msg in self.consumer.consume(500, 2.0):
            value = msg.value()
            if msg.error() or value is None:
                continue
            self.raw.append(value)
            self.rows.append(self.deserialize(value, ctx))
        return self.rows

    def close(self) -> None:
        self.consumer.close()


def expected_revenue(rows: list[dict[str, Any]]) -> dict[tuple[datetime, str], tuple[int, float]]:
    out: dict[tuple[datetime, str], tuple[int, float]] = {}
    for o in rows:
        key = (o["ts"].replace(second=0), o["customer"])
        n, total = out.get(key, (0, 0.0))
        out[key] = (n + 1, total + o["amount"])
    return out


def latest_revenue(rows: list[dict[str, Any]]) -> dict[tuple[datetime, str], tuple[int, float]]:
    """The last value of each window and customer (an ``update`` output)."""
    return {(r["minute"]["start"], r["customer"]): (r["n"], r["revenue"]) for r in rows}


def ready(cluster: E2ECluster, ns: str, name: str) -> None:
    try:
        wait_ready(cluster, ns, name)
    except AssertionError as exc:
        events = cluster.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False)
        raise AssertionError(f"{exc}\n{cluster.diagnostics(ns)}\n{events}") from None


def subject_id(client: SchemaRegistryClient, subject: str) -> int:
    found = client.get_latest_version(subject).schema_id
    assert found is not None
    return found


@pytest.mark.timeout(1200)
def test_avro_in_and_out_through_driver_pods_with_a_subject_evolving_and_schema_checks(
    cluster: E2ECluster, ns: str, registry_url: str,
) -> None:
    client = SchemaRegistryClient({"url": registry_url, "timeout": 30})
    src, revenue, items = f"{ns}-orders", f"{ns}-revenue", f"{ns}-items"
    create_topics(cluster.bootstrap, src, revenue, items)
    first = orders(240)  # 4 minutes, 4 customers
    produce_avro(cluster.bootstrap, client, src, ORDER_V1, first)
    source = {"name": "orders", "topic": src, "format": "avro"}
    revenue_doc = query_doc(ns, "revenue", {
        "sources": [source], "sql": REVENUE_SQL,
        "sink": {"topic": revenue, "format": "avro", "key": ["customer"], "outputMode": "update"}})

    def items_doc(sql: str) -> dict[str, Any]:
        return query_doc(ns, "items", {"sources": [source], "sql": sql,
                                       "sink": {"topic": items, "format": "avro"}})

    cluster.apply(cluster_doc(ns, cluster.bootstrap, schemaRegistry={"url": registry_url}), revenue_doc,
                  items_doc(ITEMS_SQL))
    ready(cluster, ns, "revenue")
    out = AvroOutput(cluster.bootstrap, client, revenue)
    try:
        # 1. exact results, in the schema the operator registered under <sink>-value
        want = expected_revenue(first)
        cluster.wait_for("the exact revenue per minute and customer",
                         lambda: latest_revenue(out.poll()) == want, READY_TIMEOUT)
        sink_id = subject_id(client, f"{revenue}-value")
        assert {struct.unpack(">bI", v[:5]) for v in out.raw} == {(0, sink_id)}
        st = (cluster.get("streamingquery", ns, "revenue") or {})["status"]
        pinned = st["plan"]["hash"]
        pod = cluster.driver_pod(ns, "revenue")
        assert pod is not None
        restarts = cluster.restart_count(ns, "revenue")

        # 2. the source subject gains a version mid-stream: read by the same driver, plan unchanged
        later = orders(120, start=240, coupon=True)
        produce_avro(cluster.bootstrap, client, src, ORDER_V2, later)
        assert len(client.get_versions(f"{src}-value")) == 2
        want = expected_revenue(first + later)
        cluster.wait_for("the records of the newer writer schema counted",
                         lambda: latest_revenue(out.poll()) == want, READY_TIMEOUT)
        st = (cluster.get("streamingquery", ns, "revenue") or {})["status"]
        assert st["plan"]["hash"] == pinned
        now = cluster.driver_pod(ns, "revenue")
        assert now is not None and now["metadata"]["uid"] == pod["metadata"]["uid"]
        assert cluster.restart_count(ns, "revenue") == restarts
    finally:
        out.close()

    # 3. the stateless query: an incompatible output change refused at apply with the registry's
    # reason, a compatible one carried out in place
    ready(cluster, ns, "items")
    items_pinned = (cluster.get("streamingquery", ns, "items") or {})["status"]["plan"]["hash"]
    refused = cluster.apply_result(items_doc("SELECT order_id, CAST(amount AS STRING) AS amount FROM orders"))
    assert refused.returncode != 0, refused.stdout
    assert f"incompatible with subject '{items}-value'" in refused.stderr, refused.stderr
    assert "amount" in refused.stderr, refused.stderr
    assert (cluster.get("streamingquery", ns, "items") or {})["status"]["plan"]["hash"] == items_pinned
    cluster.apply(items_doc("SELECT order_id, amount, customer FROM orders"))
    # new records: batches for the rollout's health gate
    produce_avro(cluster.bootstrap, client, src, ORDER_V2, orders(40, start=360, coupon=True))

    def rolled() -> dict[str, Any] | None:
        st = (cluster.get("streamingquery", ns, "items") or {}).get("status") or {}
        last = st.get("lastUpgrade") or {}
        return st if "rollout" not in st and last.get("outcome") == "Succeeded" else None

    st = cluster.wait_for("the compatible change rolled out", rolled, READY_TIMEOUT)
    assert st["lastUpgrade"]["decision"] == "in-place" and st["plan"]["version"] == 1, st["lastUpgrade"]
    assert len(client.get_versions(f"{items}-value")) == 2
