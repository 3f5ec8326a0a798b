"""The settings of ``sluice-runtime run`` (parsed by :mod:`sluice_runtime.cli`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.core.replace import PreviousVersion

from sluice_runtime.kafka_security import KafkaSecurity


@dataclass
class RunConfig:
    plan: str
    checkpoint: str
    bootstrap: str
    master: str = "local[2]"
    conf: dict[str, str] = field(default_factory=dict)
    jars: list[str] = field(default_factory=list)
    available_now: bool = False
    http_addr: str | None = "0.0.0.0:8080"
    query_id: str | None = None
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)
    #: ids the operator assigned (``status.identity``); None: derived from the query id
    consumer_group: str | None = None
    transactional_id: str | None = None
    resolve_connector: bool = False
    #: election (None: run at once on the checkpoint, no standby)
    lease_name: str | None = None
    lease_namespace: str | None = None
    pod_name: str | None = None
    lease_seconds: float = 10.0
    #: a replaced plan version's first term starts where this previous version's output ends
    previous: PreviousVersion | None = None
