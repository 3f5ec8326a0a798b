"""The QueryCluster custom resource: shared runtime settings and capacity for StreamingQueries."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from sluice.core.spec import CleanupPolicy, UpgradePolicy
from sluice.crd.common import (
    QUANTITY_PATTERN,
    CrdKind,
    CrdModel,
    ResourceAmounts,
    Resources,
    SecretKeyRef,
    StatusModel,
)
from sluice.crd.streamingquery import Condition

SERVICE_ID_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"


class KafkaTls(CrdModel):
    """TLS towards the brokers; certificates come from Secrets, never inline."""

    ca_secret: SecretKeyRef | None = Field(default=None, description="CA certificate (PEM).")
    cert_secret: SecretKeyRef | None = Field(default=None, description="Client certificate (PEM).")
    key_secret: SecretKeyRef | None = Field(default=None, description="Client private key (PEM).")


class KafkaSasl(CrdModel):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(description="SASL mechanism.")
    username_secret: SecretKeyRef = Field(description="Secret key holding the user name.")
    password_secret: SecretKeyRef = Field(description="Secret key holding the password.")


class KafkaSettings(CrdModel):
    bootstrap_servers: str = Field(
        min_length=1, description="Comma-separated host:port list of Kafka brokers."
    )
    tls: KafkaTls | None = Field(default=None, description="TLS settings (Secret references).")
    sasl: KafkaSasl | None = Field(default=None, description="SASL settings (Secret references).")
    default_partitions: int = Field(
        default=1, ge=1, description="Partitions of sink topics the operator creates."
    )
    default_replication_factor: int = Field(
        default=1, ge=1, description="Replication factor of sink topics the operator creates."
    )


class Storage(CrdModel):
    storage_class_name: str | None = Field(
        default=None, description="StorageClass of state volumes; absent: the cluster default."
    )
    size: str = Field(default="1Gi", pattern=QUANTITY_PATTERN, description="Size of each state volume.")
    access_mode: Literal["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"] = Field(
        default="ReadWriteOnce", description="Access mode of state volumes."
    )


def _default_driver() -> Resources:
    return Resources(
        requests=ResourceAmounts(cpu="500m", memory="1Gi"), limits=ResourceAmounts(memory="2Gi")
    )


def _default_executor() -> Resources:
    return Resources(
        requests=ResourceAmounts(cpu="500m", memory="1Gi"), limits=ResourceAmounts(memory="2Gi")
    )


class QueryClusterSpec(CrdModel):
    """Shared settings for the StreamingQueries that refer to this cluster."""

    service_id: str = Field(
        min_length=1, max_length=40, pattern=SERVICE_ID_PATTERN,
        description="Prefix of consumer groups, transactional ids, checkpoint paths and versioned topics.",
    )
    kafka: KafkaSettings = Field(description="The Kafka cluster that queries read and write.")
    image: str | None = Field(
        default=None, description="Runtime image; absent: sluice-runtime:<operator version>."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Pull policy of the runtime image."
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="Spark settings applied to every query (plan-pinned settings win)."
    )
    driver: Resources = Field(default_factory=_default_driver, description="Driver container resources.")
    executor: Resources = Field(
        default_factory=_default_executor, description="Executor container resources."
    )
    executors: int = Field(
        default=0, ge=0, le=1000,
        description="Executor pods per query; 0 runs Spark in local mode inside the driver pod.",
    )
    storage: Storage = Field(default_factory=Storage, description="State volumes.")
    standby_replicas: int = Field(
        default=0, ge=0, le=3, description="Standby drivers per query waiting to take over."
    )
    cleanup: CleanupPolicy = Field(
        default_factory=CleanupPolicy, description="Default clean-up policy of retired plan versions."
    )
    upgrade: UpgradePolicy = Field(
        default_factory=UpgradePolicy, description="Default upgrade policy of queries."
    )
    drain_seconds: int = Field(
        default=120, ge=10, le=3600,
        description="Time a driver gets to finish its micro-batch and commit when stopped.",
    )


class QueryClusterStatus(StatusModel):
    observed_generation: int | None = Field(
        default=None, description="The generation of the spec the operator last reconciled.")
    phase: Literal["Ready", "Degraded"] | None = Field(
        default=None, description="Ready, or Degraded (Kafka unreachable or the cluster invalid).")
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready and Degraded (reason KafkaReachable, KafkaUnreachable or "
        "ClusterInvalid).")
    image: str | None = Field(default=None, description="Resolved runtime image.")


class QueryCluster(CrdModel, CrdKind):
    """A QueryCluster: Kafka connection, runtime image, Spark settings and capacity shared by queries."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    kind: ClassVar[str] = "QueryCluster"  # type: ignore[misc]
    plural: ClassVar[str] = "queryclusters"
    singular: ClassVar[str] = "querycluster"
    short_names: ClassVar[list[str]] = ["qc"]
    printer_columns: ClassVar[list[dict[str, Any]]] = [
        {"name": "Service", "type": "string", "jsonPath": ".spec.serviceId"},
        {"name": "Kafka", "type": "string", "jsonPath": ".spec.kafka.bootstrapServers"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    api_version: Literal["sluice.dev/v1alpha1"] = Field(default="sluice.dev/v1alpha1", alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: QueryClusterSpec
    status: QueryClusterStatus = Field(default_factory=QueryClusterStatus)
