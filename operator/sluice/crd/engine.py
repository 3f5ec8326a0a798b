"""The engine snapshot pinned per query (``status.engine``) and carried by an engine rollout."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import Field

from sluice.core.classify.runtime import flatten
from sluice.core.engine import EngineFacts
from sluice.crd.base import Resources, StatusModel
from sluice.crd.kafka import KafkaClientSettings, KafkaSasl, KafkaTls
from sluice.crd.objectstore import ObjectStore
from sluice.crd.podtemplate import PodTemplates

ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
#: what a standby driver does with executor pods (QueryCluster ``spec.standbyExecutors``)
StandbyExecutors = Literal["release", "hold"]

#: The version of the pod template the operator's builders make of an engine. An operator whose
#: builders change the driver pods' template bumps it (``tests/unit/operator/test_workload_template.py``
#: fails until it does): every query's engine then differs from the one pinned in its status, and
#: the new template reaches the queries through their QueryCluster's rollout, in waves behind the
#: health gate, never by the operator's upgrade alone.
WORKLOAD_TEMPLATE = 4


class Engine(StatusModel):
    """What a query's drivers execute with: every QueryCluster field that reaches its pods or its
    plan. Pinned per query (status.engine); a change is rolled out like an upgrade."""

    image: str = Field(description="Runtime image.")
    image_pull_policy: ImagePullPolicy = Field(default="IfNotPresent", description="Its pull policy.")
    spark_version: str = Field(description="The Spark version the image carries (the plan's target).")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Spark settings.")
    driver: Resources = Field(default_factory=Resources, description="Driver container resources.")
    executor: Resources = Field(default_factory=Resources, description="Executor container resources.")
    executors: int = Field(default=0, description="Executor pods per query.")
    drain_seconds: int = Field(default=120, description="Drain budget of a driver.")
    kafka_bootstrap_servers: str = Field(description="Kafka bootstrap servers.")
    kafka_tls: KafkaTls | None = Field(default=None, description="Kafka TLS (Secret references).")
    kafka_sasl: KafkaSasl | None = Field(default=None, description="Kafka SASL (Secret references).")
    kafka_client_settings: KafkaClientSettings | None = Field(
        default=None, description="Allow-listed Kafka client properties (absent: none; empty ones are none "
        "too, so that they change no digest).")
    pod_template: PodTemplates | None = Field(
        default=None, description="The QueryCluster's pod templates of the driver and executor pods (absent: "
        "none; an empty one is none too, so that it changes no digest).")
    lease_seconds: int | None = Field(
        default=None, description="leaseDurationSeconds of the driver Lease (absent: the default, 10).")
    object_store: ObjectStore | None = Field(
        default=None, description="The object store the checkpoints live in (absent: the state volume). "
        "Where they live (its uri, or a volume) never changes under a running query.")
    standby_executors: StandbyExecutors | None = Field(
        default=None, description="What a standby driver does with executor pods (absent: hold, the "
        "default; so that the default changes no digest).")
    template: int = Field(default=0, description="The version of the operator's pod template it was deployed "
                          "with.")

    def canonical(self) -> dict[str, Any]:
        """The engine fields as JSON (camelCase), nothing a status record adds."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True,
                               include=set(Engine.model_fields))

    def compute_digest(self) -> str:
        """sha256 of the canonical snapshot (every field, defaults included: a later default of the
        operator is a change of what runs)."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def snapshot(self) -> Engine:
        """The engine fields alone (a status record carries more)."""
        return Engine.model_validate(self.canonical())

    def record(self) -> dict[str, Any]:
        """The snapshot as status records it (``status.engine``, ``rollout.targetEngine``)."""
        return {**self.canonical(), "digest": self.compute_digest()}

    def facts(self) -> EngineFacts:
        """What the pure core compares (the engine classifier, the plan inputs, the wave planner)."""
        rest = {k: v for k, v in self.canonical().items() if k not in ("image", "sparkVersion", "sparkConf")}
        return EngineFacts(digest=self.compute_digest(), image=self.image, spark_version=self.spark_version,
                           spark_conf=dict(self.spark_conf), workload=flatten(rest))
