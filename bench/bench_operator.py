"""Benchmark: the operator reconciling 500 StreamingQuery objects against a real API server.

    python bench/bench_operator.py [--count 500] [--kafka]

Starts a private control plane (sluice_dev.platform.kube) in a temporary directory, installs
the CRDs, creates one QueryCluster and ``--count`` StreamingQueries, then runs the operator
in-process (kopf, leader election on) until every query has a pinned plan and an
observedGeneration. Reported:

* baseline: wall time to merely create the objects (POSTs from one client, sequential);
* reconcile: wall time from operator start until all queries are reconciled;
* API calls: made by the operator's own REST client (counted in sluice.operator.kube) and the
  API server's ``apiserver_request_total`` delta (everything: kopf watches/patches, controllers);
* memory: the process's peak RSS before and after.

Without ``--kafka`` the sink-topic step uses an in-memory stub, so the numbers are the
Kubernetes side only; with ``--kafka`` a real broker is started as well.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def apiserver_requests(kube: Any) -> int:
    text = kube.request_text("/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


class StubAdmin:
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.lock = threading.Lock()

    def topics(self) -> set[str]:
        return set(self.names)

    def ensure_topic(self, topic: str, partitions: int, replication: int) -> Any:
        from sluice.operator.kafka_admin import TopicResult

        with self.lock:
            created = topic not in self.names
            self.names.add(topic)
        return TopicResult(topic, created)

    def delete_topic(self, topic: str) -> bool:
        with self.lock:
            present = topic in self.names
            self.names.discard(topic)
        return present


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--kafka", action="store_true", help="Use a real broker for sink topics.")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--kubeconfig", help="Use this running cluster (CRDs installed) instead of starting one."
    )
    parser.add_argument("--bootstrap", help="With --kafka: an existing broker instead of starting one.")
    opts = parser.parse_args()

    from kubernetes import config
    from sluice.commands.operator import run_operator
    from sluice.operator import kube as kube_mod
    from sluice.operator.env import Env
    from sluice.operator.handlers import _kopf
    from sluice.operator.kube import Kube
    from sluice_dev.platform import kube as kube_component

    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        state = Path(tmp)
        kafka_bootstrap = opts.bootstrap or "127.0.0.1:9"
        kafka_component = None
        own_cluster = opts.kubeconfig is None
        try:
            if opts.kafka and not opts.bootstrap:
                from sluice_dev.platform import kafka as kafka_component  # type: ignore[no-redef]

                kafka_component.provision()
                kafka_bootstrap = kafka_component.start(state).env["SLUICE_KAFKA_BOOTSTRAP"]
            if own_cluster:
                bin_dir = kube_component.provision()
                kubeconfig = kube_component.start(state).env["KUBECONFIG"]
                env = {"KUBECONFIG": kubeconfig, "PATH": f"{bin_dir}:/usr/bin:/bin"}
                subprocess.run(
                    [str(bin_dir / "kubectl"), "apply", "--server-side", "-f", str(REPO / "crds")],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                subprocess.run(
                    [
                        str(bin_dir / "kubectl"),
                        "wait",
                        "--for=condition=Established",
                        "--timeout=60s",
                        "crd/streamingqueries.sluice.dev",
                        "crd/queryclusters.sluice.dev",
                    ],
                    env=env,
                    check=True,
                    capture_output=True,
                )
            else:
                kubeconfig = opts.kubeconfig
            api = config.new_client_from_config(config_file=kubeconfig)
            kube = Kube(api)

            def request_text(path: str) -> str:
                method, url, headers, _, _ = api.param_serialize(
                    method="GET",
                    resource_path=path,
                    header_params={"Accept": "text/plain"},
                    auth_settings=["BearerToken"],
                )
                resp = api.call_api(method, url, header_params=headers)
                resp.read()
                return resp.data.decode()

            kube.request_text = request_text  # type: ignore[attr-defined]
            ns = f"bench-{int(time.time())}"
            kube.request(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            )
            kube.create(
                {
                    "apiVersion": "sluice.dev/v1alpha1",
                    "kind": "QueryCluster",
                    "metadata": {"name": "default", "namespace": ns},
                    "spec": {"serviceId": "bench", "kafka": {"bootstrapServers": kafka_bootstrap}},
                }
            )

            rss_start = rss_mib()
            t0 = time.perf_counter()
            for i in range(opts.count):
                kube.create(
                    {
                        "apiVersion": "sluice.dev/v1alpha1",
                        "kind": "StreamingQuery",
                        "metadata": {"name": f"q{i:04d}", "namespace": ns},
                        "spec": {
                            "sources": [
                                {
                                    "name": "orders",
                                    "topic": "orders",
                                    "schema": [
                                        {"name": "customer", "type": "string"},
                                        {"name": "amount", "type": "double"},
                                    ],
                                }
                            ],
                            "sql": "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer",
                            "sink": {"topic": f"out-{i:04d}", "outputMode": "update"},
                        },
                    }
                )
            baseline = time.perf_counter() - t0

            stub = StubAdmin()

            def env_factory(k: Kube) -> Env:
                e = Env(kube=k, events=_kopf.post_event)
                if not opts.kafka:
                    e.topic_admin = lambda namespace, cluster: stub  # type: ignore[method-assign]
                return e

            calls_before = kube_mod.CALLS.total
            server_before = apiserver_requests(kube)
            stop, ready = threading.Event(), threading.Event()
            args = argparse.Namespace(
                namespace=[ns],
                peering=None,
                standalone=True,
                no_leader_election=False,
                lease_name="sluice-operator",
                lease_namespace=ns,
                lease_seconds=15,
                identity="bench",
                metrics_port=0,
                kubeconfig=kubeconfig,
                log_format="text",
                verbose=False,
            )
            thread = threading.Thread(target=run_operator, args=(args, stop, ready, env_factory), daemon=True)
            import logging

            logging.basicConfig(level=logging.WARNING)
            t1 = time.perf_counter()
            thread.start()
            done = 0
            while time.perf_counter() - t1 < opts.timeout:
                items = kube.request("GET", Kube.path("StreamingQuery", ns)).get("items", [])
                done = sum(
                    1
                    for o in items
                    if (o.get("status") or {}).get("plan")
                    and (o.get("status") or {}).get("observedGeneration") == 1
                )
                if done >= opts.count:
                    break
                time.sleep(1.0)
            reconcile = time.perf_counter() - t1
            server_after = apiserver_requests(kube)
            operator_calls = kube_mod.CALLS.total - calls_before
            stop.set()
            thread.join(timeout=60)
            deployments = len(kube.list("Deployment", ns))
            leases = len(kube.list("Lease", ns, "sluice.dev/query"))
            result = {
                "queries": opts.count,
                "reconciled": done,
                "deployments": deployments,
                "driver_leases": leases,
                "baseline_create_seconds": round(baseline, 2),
                "reconcile_seconds": round(reconcile, 2),
                "reconcile_per_query_ms": round(reconcile / max(done, 1) * 1000, 1),
                "operator_rest_calls": operator_calls,
                "operator_rest_calls_per_query": round(operator_calls / max(done, 1), 1),
                "apiserver_requests_delta": server_after - server_before,
                "rss_mib_start": round(rss_start, 1),
                "rss_mib_peak": round(peak_rss_mib(), 1),
                "kafka": "real" if opts.kafka else "stub",
                "control_plane": "private (etcd+apiserver+controller-manager+scheduler)"
                if own_cluster
                else f"existing ({kubeconfig})",
            }
            print(json.dumps(result, indent=2))
            return 0 if done >= opts.count else 1
        finally:
            if kafka_component is not None:
                kafka_component.stop(state)
            if own_cluster:
                kube_component.stop(state)


if __name__ == "__main__":
    sys.exit(main())
