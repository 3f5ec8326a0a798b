"""What the reconcile modules share: the environment, one query's reconcile run, retry signals.

Handlers stay thin and call into ``reconcile`` (StreamingQuery create/update/resume),
``executor`` (the rollout executor it delegates to), ``deletion`` (the finalizer) and ``cluster``
(QueryCluster). None of them imports kopf: retries are asked for by raising ``Retry``
(temporary) or ``Stop`` (wait for the next spec edit); the handler modules translate them into
kopf's errors. Status is written *before* acting (write-ahead log).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.core.plan.model import Plan
from sluice.core.records import QueryRecords, StatusModel
from sluice.core.status import (
    EventReason,
    Facts,
    Reason,
    StatusProblem,
    get_condition,
    merge_patch,
    now_rfc3339,
    phase_transition,
    reduce_status,
    with_replan_condition,
    with_short_hash,
)
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.registry import SchemaRegistry
from sluice.crd.streamingquery import StreamingQuerySpec, StreamingQueryStatus
from sluice.operator.kafka_admin import TopicAdmin, admin_config
from sluice.operator.kube import Kube
from sluice.operator.metrics import OperatorMetrics, finished_outcome, metrics
from sluice.operator.registry import TIMEOUT as REGISTRY_TIMEOUT
from sluice.operator.registry import Registry, RegistryClient, read_registry_secrets

log = logging.getLogger("sluice.operator")

DEFAULT_CLUSTER = "default"
MAX_BACKOFF = 300.0


class Retry(Exception):
    """Something outside our control is missing or down: retry later with back-off."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


class Stop(Exception):
    """The spec is wrong: nothing to do until it changes (status says why)."""


def backoff(retry: int, base: float = 5.0) -> float:
    return min(MAX_BACKOFF, base * (2 ** min(retry, 10)))


EventSink = Callable[[dict[str, Any], str, str, str], None]


def _no_events(body: dict[str, Any], type_: str, reason: str, message: str) -> None:
    log.info("event %s %s: %s", type_, reason, message)


@dataclass
class Env:
    kube: Kube
    events: EventSink = _no_events
    clock: Callable[[], str] = now_rfc3339
    metrics: OperatorMetrics = field(default_factory=metrics)
    kafka_timeout: float = 10.0
    _admins: dict[str, TopicAdmin] = field(default_factory=dict)
    #: plans read from their (immutable) ConfigMaps, by (namespace, name)
    plans: dict[tuple[str, str], Plan] = field(default_factory=dict)
    #: makes the client of a schema registry (url, basic-auth and CA secrets); a fake in tests
    registry_factory: Callable[[str, dict[str, str], float], Registry] = field(
        default=lambda url, secrets, timeout: _registry(url, secrets, timeout))
    _registries: dict[str, Registry] = field(default_factory=dict)

    def compile(self, spec: Any, target: Any = None) -> Plan:
        from sluice.core.compiler import compile_query

        return compile_query(spec, target)

    def classify(self, old: Plan, new: Plan, policy: Any, extra: Any = None) -> Any:
        from sluice.core.classify import classify

        return classify(old, new, policy, extra=extra)

    def topic_admin(self, namespace: str, cluster: QueryClusterSpec) -> TopicAdmin:
        secrets = read_kafka_secrets(self.kube, namespace, cluster)
        key = f"{namespace}/{cluster.kafka.bootstrap_servers}/{sorted(secrets.items())!r}"
        admin = self._admins.get(key)
        if admin is None:
            admin = TopicAdmin(admin_config(cluster.kafka, secrets), timeout=self.kafka_timeout)
            self._admins[key] = admin
        return admin


    def registry(self, namespace: str, settings: SchemaRegistry,
                 timeout: float = REGISTRY_TIMEOUT) -> Registry:
        """The client of a QueryCluster's schema registry (``RegistryUnavailable`` when a Secret it
        refers to lacks its key); ``timeout``: seconds a request may take (the admission webhook's
        answer has to fit the API server's own timeout)."""
        secrets = read_registry_secrets(self.kube, namespace, settings)
        key = f"{namespace}/{settings.url}/{timeout}/{sorted(secrets.items())!r}"
        client = self._registries.get(key)
        if client is None:
            client = self.registry_factory(settings.url, secrets, timeout)
            self._registries[key] = client
        return client


def _registry(url: str, secrets: dict[str, str], timeout: float) -> Registry:
    """A real registry client; a CA certificate goes to a file of its content's digest (the client
    reads a path)."""
    ca_file = None
    if "ca" in secrets:
        digest = hashlib.sha256(secrets["ca"].encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"sluice-registry-ca-{digest}.pem"
        path.write_text(secrets["ca"])
        ca_file = str(path)
    return RegistryClient(url, username=secrets.get("username"), password=secrets.get("password"),
                          ca_file=ca_file, timeout=timeout)


def read_kafka_secrets(kube: Kube, namespace: str, cluster: QueryClusterSpec) -> dict[str, str]:
    refs: dict[str, Any] = {}
    if cluster.kafka.tls is not None:
        refs.update(ca=cluster.kafka.tls.ca_secret, cert=cluster.kafka.tls.cert_secret,
                    key=cluster.kafka.tls.key_secret)
    if cluster.kafka.sasl is not None:
        refs.update(username=cluster.kafka.sasl.username_secret, password=cluster.kafka.sasl.password_secret,
                    token=cluster.kafka.sasl.token_secret)
    out: dict[str, str] = {}
    for key, ref in refs.items():
        if ref is None:
            continue
        secret = kube.get("Secret", namespace, ref.name)
        data = (secret or {}).get("data", {})
        if ref.key not in data:
            raise Retry(f"Secret {ref.name!r} has no key {ref.key!r}", 30)
        out[key] = base64.b64decode(data[ref.key]).decode()
    return out


def _stored(value: Any) -> Any:
    """A status value as stored: records (and lists of them) in their storage form."""
    if isinstance(value, StatusModel):
        return value.for_storage()
    if isinstance(value, list):
        return [_stored(v) for v in value]
    return value


@dataclass
class QueryRun:
    """One reconcile of one StreamingQuery: the object, its status as we last wrote it, and the
    typed records of that status (``records``: parsed once per written status)."""

    env: Env
    body: dict[str, Any]
    status: dict[str, Any]
    _parsed: tuple[dict[str, Any], QueryRecords] | None = field(default=None, repr=False)

    @property
    def records(self) -> QueryRecords:
        """The status's records (the pinned plan, the rollout, the last upgrade and history, the
        versions, the engine), parsed from the status once after each write."""
        if self._parsed is None or self._parsed[0] is not self.status:
            self._parsed = (self.status, QueryRecords.of(self.status))
        return self._parsed[1]

    @property
    def ns(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def generation(self) -> int | None:
        return self.body["metadata"].get("generation")

    def write(self, updates: dict[str, Any], facts: Facts | None = None, *,
              resource_version: str | None = None) -> bool:
        """Merge ``updates`` (records or their storage form; None deletes a key) and the reduced
        conditions into the status; returns whether anything was written. ``resource_version``: only
        if the object is still at that version (a 409 ``KubeError`` otherwise)."""
        new = dict(self.status)
        new.update({k: _stored(v) for k, v in updates.items()})
        if facts is not None:
            new.update(reduce_status(self.status, facts, self.env.clock()))
        new = with_short_hash(new)  # derived, like the phase: every write of a pinned plan carries it
        new = with_replan_condition(new, self.env.clock())
        patch = merge_patch(self.status, {k: v for k, v in new.items() if self.status.get(k) != v})
        if not patch:
            return False
        # the status models are the contract of what is written (a wrong outcome or type raises)
        StreamingQueryStatus.model_validate({k: v for k, v in new.items() if v is not None})
        self.env.kube.patch_status("StreamingQuery", self.ns, self.name, patch, resource_version)
        transition = phase_transition(self.status, new)
        outcome = finished_outcome(self.status, new)
        self.status = {k: v for k, v in new.items() if v is not None}
        if transition:
            self.env.metrics.phase(self.ns, self.name, transition[1])
        if outcome is not None:
            self.env.metrics.upgrade_outcome(self.ns, self.name, outcome)
        return True

    def event(self, type_: str, reason: EventReason, message: str) -> None:
        self.env.events(self.body, type_, str(reason), message)


def _facts(run: QueryRun, spec: StreamingQuerySpec | None, *, problem: StatusProblem | None = None,
           driver_ready: bool = False) -> Facts:
    records = run.records
    return Facts(
        generation=run.generation,
        suspended=bool(spec.suspend) if spec else False,
        problem=problem,
        plan_pinned=records.plan is not None,
        rollout_step=records.rollout.step if records.rollout else None,
        driver_ready=driver_ready,
    )


def _problem(run: QueryRun, spec: StreamingQuerySpec | None, reason: Reason, message: str,
             extra: dict[str, Any] | None = None, event: EventReason | None = None) -> None:
    previous = get_condition(run.status.get("conditions") or [], "Degraded")
    repeated = bool(previous and previous.get("status") == "True" and previous.get("message") == message)
    run.write(extra or {}, _facts(run, spec, problem=StatusProblem(reason, message)))
    if event is not None and not repeated:
        run.event("Warning", event, message)

