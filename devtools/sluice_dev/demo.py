"""`make demo`: the main job on an embedded default.

Starts (or reuses) the local platform, deploys the operator, applies the page-view example from
``examples/`` (a QueryCluster pointing at the platform's Kafka and ``examples/pageviews.yaml``),
produces sample page views, then prints ``kubectl get sq`` and the first result rows. The
platform keeps running afterwards for exploring.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sluice_dev.platform import chart, common, orchestrate

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pageviews.yaml"
NAMESPACE = "demo"
SOURCE_TOPIC = "pageviews"
RESULT_TOPIC = "pageviews-per-minute"
PAGES = ["/", "/pricing", "/docs", "/blog", "/signup"]
FIRST_ROW_TIMEOUT = 420.0


def cluster_manifest(bootstrap: str) -> str:
    return (
        "apiVersion: sluice.dev/v1alpha1\n"
        "kind: QueryCluster\n"
        f"metadata: {{name: default, namespace: {NAMESPACE}}}\n"
        "spec:\n"
        "  serviceId: demo\n"
        f"  kafka: {{bootstrapServers: '{bootstrap}'}}\n"
    )


def sample_events(count: int, now: datetime, seed: int = 7) -> list[dict[str, Any]]:
    """Page views spread over the last three minutes (deterministic for a seed)."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        ts = now - timedelta(seconds=rng.uniform(0, 180))
        events.append({
            "page": rng.choice(PAGES),
            "user_id": f"u{rng.randrange(50)}",
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "seq": i,
        })
    return events


def kubectl(state: dict[str, Any], *args: str, stdin: str | None = None) -> str:
    bin_dir = Path(state["kube"]["info"]["bin_dir"])
    result = subprocess.run(
        [str(bin_dir / "kubectl"), *args], input=stdin, capture_output=True, text=True, check=False,
        env={"KUBECONFIG": state["kube"]["env"]["KUBECONFIG"], "PATH": "/usr/bin:/bin"},
    )
    if result.returncode != 0 and "AlreadyExists" not in result.stderr:
        raise common.PlatformError("kubectl", f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def produce(bootstrap: str, events: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(SOURCE_TOPIC, num_partitions=2, replication_factor=1)])
    for future in futures.values():
        try:
            future.result(30)
        except Exception as exc:  # topic may already exist from an earlier demo run
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for event in events:
        producer.produce(SOURCE_TOPIC, key=event["page"], value=json.dumps(event))
    producer.flush(30)


def first_rows(bootstrap: str, want: int, timeout: float) -> list[dict[str, Any]]:
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"sluice-demo-{time.time_ns()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([RESULT_TOPIC])
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(rows) < want:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            rows.append(json.loads(msg.value() or b"null"))
    finally:
        consumer.close()
    return rows


def main(state_dir: Path = REPO / ".platform") -> int:
    t0 = time.monotonic()
    try:
        state = orchestrate.up(state_dir)
        running = orchestrate.status(state_dir, log=lambda _m: None)
        if not running or not orchestrate.operator_ready(state_dir):
            state = orchestrate.deploy(state_dir)
        bootstrap = state["kafka"]["env"]["SLUICE_KAFKA_BOOTSTRAP"]
        # the real node's pods pass the restricted Pod Security Standard: the namespace enforces it
        kubectl(state, "apply", "-f", "-", stdin=json.dumps(chart.namespace_manifest(NAMESPACE)))
        kubectl(state, "apply", "-f", "-", stdin=cluster_manifest(bootstrap))
        kubectl(state, "apply", "-f", str(EXAMPLE))
        events = sample_events(300, datetime.now(UTC))
        produce(bootstrap, events)
        print(f"produced {len(events)} page views to topic {SOURCE_TOPIC!r}; waiting for results ...")
        rows = first_rows(bootstrap, want=10, timeout=FIRST_ROW_TIMEOUT)
    except common.PlatformError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    print(kubectl(state, "get", "sq", "-n", NAMESPACE))
    if not rows:
        print(f"demo failed: no result rows on {RESULT_TOPIC!r} within {FIRST_ROW_TIMEOUT:.0f}s; see "
              f"`kubectl describe sq -n {NAMESPACE}` and `kubectl logs -n {NAMESPACE} -l sluice.dev/query`",
              file=sys.stderr)
        return 1
    print(f"first result rows from topic {RESULT_TOPIC!r} ({time.monotonic() - t0:.0f}s after start):")
    for row in rows:
        print("  " + json.dumps(row, sort_keys=True))
    print(
        "\nThe platform keeps running. Explore it:\n"
        "  source .platform/env\n"
        f"  kubectl get sq,qc,pods,pvc -n {NAMESPACE}\n"
        f"  kubectl describe sq pageviews-per-minute -n {NAMESPACE}\n"
        "Stop it with: make platform-down"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
