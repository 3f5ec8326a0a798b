"""The operator's driver container and the runtime agree (this test imports both sides; the
product packages never import each other).

The real builder makes the driver Deployment of a query on a QueryCluster with TLS and SASL; its
container env is resolved as the kubelet does (``secretKeyRef`` and ``fieldRef`` values supplied
here, ``$(VAR)`` expanded against earlier variables) and handed to the runtime's own parser. The
Kafka clients the runtime would build, and the ids it would use, must be the ones the operator
meant and recorded in ``status.identity``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from sluice.core import sizing
from sluice.operator import builders
from sluice.operator.workload import _identity_status
from sluice_runtime import cli
from sluice_runtime.session import effective_conf
from sluice_runtime.steps import BuildContext

from tests.support.operator_fixtures import cluster_spec, context
from tests.support.runtime import plan_from_yaml

CA = "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n"
SECRETS = {
    ("kafka-user", "username"): "orders-app",
    ("kafka-user", "password"): "s3cr\"t",
    ("kafka-tls", "ca.crt"): CA,
    ("kafka-tls", "tls.crt"): CERT,
    ("kafka-tls", "tls.key"): KEY,
}
FIELDS = {"status.podIP": "10.1.2.3", "metadata.name": "totals-driver-7d9f8c6b5-x2k4q",
          "metadata.namespace": "shop"}
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def kubelet_env(env: list[dict[str, Any]], secrets: Mapping[tuple[str, str], str],
                fields: Mapping[str, str], resources: Mapping[str, Any] | None = None) -> dict[str, str]:
    """A container's environment as the kubelet sets it (``resources``: the container's, for
    ``resourceFieldRef``: bytes, the default divisor 1)."""
    out: dict[str, str] = {}

    def expand(value: str) -> str:
        def sub(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            return out.get(m.group(1), m.group(0))  # undefined references stay as written

        return _REF.sub(sub, value)

    for item in env:
        if "value" in item:
            out[item["name"]] = expand(item["value"])
            continue
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            out[item["name"]] = secrets[(ref["name"], ref["key"])]
        elif "fieldRef" in source:
            out[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        elif "resourceFieldRef" in source and resources is not None:
            kind, _, name = source["resourceFieldRef"]["resource"].partition(".")
            out[item["name"]] = str(sizing.parse_quantity(resources[kind][name]))
        else:
            raise AssertionError(f"unexpected env source {source}")
    return out


def tls_sasl_cluster(mechanism: str = "SCRAM-SHA-512", mutual: bool = True) -> dict[str, Any]:
    tls: dict[str, Any] = {"caSecret": {"name": "kafka-tls", "key": "ca.crt"}}
    if mutual:
        tls.update(certSecret={"name": "kafka-tls", "key": "tls.crt"},
                   keySecret={"name": "kafka-tls", "key": "tls.key"})
    return cluster_spec(kafka={
        "bootstrapServers": "kafka-0.kafka:9093,kafka-1.kafka:9093",
        "tls": tls,
        "sasl": {"mechanism": mechanism,
                 "usernameSecret": {"name": "kafka-user", "key": "username"},
                 "passwordSecret": {"name": "kafka-user", "key": "password"}},
    })


def runtime_config(cluster: dict[str, Any]) -> tuple[Any, cli.RunConfig]:
    ctx = context(cluster=cluster)
    sts = builders.driver_deployment(ctx, "ab" * 32, "totals-plan-abababababab")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = kubelet_env(container["env"], SECRETS, FIELDS, container["resources"])
    # the image's entry point is ``sluice-runtime run``; the container adds no arguments
    argv = [*container.get("command", ["sluice-runtime", "run"])[1:], *container.get("args", [])]
    return ctx, cli.resolve_config(cli.build_parser().parse_args(argv), env)


def test_tls_and_sasl_reach_every_kafka_client() -> None:
    ctx, config = runtime_config(tls_sasl_cluster())
    assert config.bootstrap == "kafka-0.kafka:9093,kafka-1.kafka:9093"
    assert config.kafka.librdkafka() == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.pem": CA,
        "ssl.certificate.pem": CERT,
        "ssl.key.pem": KEY,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "orders-app",
        "sasl.password": 's3cr"t',
    }
    spark = BuildContext(spark=None, plan=None, bootstrap=config.bootstrap,  # type: ignore[arg-type]
                         query_id=str(config.query_id), security=config.kafka,
                         consumer_group=config.consumer_group)
    ident = ctx.identity
    assert spark.source_options() == {
        "kafka.bootstrap.servers": "kafka-0.kafka:9093,kafka-1.kafka:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": CA,
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": CERT,
        "kafka.ssl.keystore.key": KEY,
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  'username="orders-app" password="s3cr\\"t";',
        "groupIdPrefix": ident.consumer_group,
    }


def test_ids_used_by_the_runtime_are_the_ones_in_status() -> None:
    ctx, config = runtime_config(tls_sasl_cluster())
    status = _identity_status(ctx)
    assert config.query_id == status["queryId"]
    assert config.consumer_group == status["consumerGroup"]
    assert config.transactional_id == status["transactionalId"]
    assert config.checkpoint == status["checkpointPath"]
    assert config.http_addr == "10.1.2.3:8080"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_every_mechanism_the_crd_allows_is_accepted(mechanism: str) -> None:
    _, config = runtime_config(tls_sasl_cluster(mechanism, mutual=False))
    assert config.kafka.sasl_mechanism == mechanism
    assert "ssl.certificate.pem" not in config.kafka.librdkafka()
    assert config.kafka.spark_options()["kafka.ssl.truststore.certificates"] == CA


def test_plaintext_cluster() -> None:
    _, config = runtime_config(cluster_spec())
    assert config.kafka.librdkafka() == {"security.protocol": "PLAINTEXT"}


#: the election settings the runtime reads (sluice_runtime parses these; see docs/operator.md)
LEASE_ENV = {"SLUICE_LEASE_NAME", "SLUICE_LEASE_NAMESPACE", "SLUICE_POD_NAME", "SLUICE_LEASE_SECONDS"}


def test_driver_pods_are_told_their_lease_and_identity() -> None:
    ctx = context(cluster=cluster_spec())
    dep = builders.driver_deployment(ctx, "ab" * 32, "totals-plan-abababababab")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    env = kubelet_env(container["env"], SECRETS, FIELDS, container["resources"])
    assert LEASE_ENV <= set(env)
    assert env["SLUICE_LEASE_NAME"] == builders.driver_lease(ctx)["metadata"]["name"] == "totals-driver"
    assert env["SLUICE_LEASE_NAMESPACE"] == "shop"
    assert env["SLUICE_POD_NAME"] == FIELDS["metadata.name"]
    assert env["SLUICE_LEASE_SECONDS"] == str(builders.driver_lease(ctx)["spec"]["leaseDurationSeconds"])


COUNT_PLAN = """\
  sources: [{name: o, topic: o, schema: [{name: shop, type: string}]}]
  sql: SELECT shop, count(*) AS n FROM o GROUP BY shop
  sink: {topic: out, outputMode: update, key: [shop]}
"""


def test_the_driver_heap_comes_from_the_container_the_kubelet_gives() -> None:
    """The default driver (limit 2Gi, local master): the runtime reads the limit from the Downward
    API and sizes the heap and RocksDB before the JVM starts; a request without a limit is read the
    same way; the QueryCluster's own spark.driver.memory wins."""
    plan = plan_from_yaml(COUNT_PLAN)
    _, config = runtime_config(cluster_spec())
    assert config.memory == sizing.Container(2048, cli.MEMORY_FIELDS[sizing.MEMORY_LIMIT_ENV], limit=True)
    conf = effective_conf(plan, config.conf, master=config.master, memory=config.memory)
    assert conf["spark.driver.memory"] == "1267m"  # 2048 - 448 JVM - 128 Python - 205 RocksDB
    assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "205"
    _, config = runtime_config(cluster_spec(driver={"requests": {"memory": "1536Mi"}}))
    assert config.memory is not None and (config.memory.mib, config.memory.limit) == (1536, False)
    _, config = runtime_config(cluster_spec(sparkConf={"spark.driver.memory": "3g"}))
    conf = effective_conf(plan, config.conf, master=config.master, memory=config.memory)
    assert conf["spark.driver.memory"] == "3g"
