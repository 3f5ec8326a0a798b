"""Identity and naming: stable ids derived from the object and an explicit plan version.

Inputs are the QueryCluster's ``service_id``, the StreamingQuery's namespace, name and uid, and the
plan version (1 at creation, +1 on every replace). Nothing depends on positions in files.

* Kafka ids (consumer group, transactional id) and the checkpoint path derive from
  (service_id, namespace, name, plan version): a query deleted with ``deletionPolicy: Retain`` and
  created again under the same name resumes from its retained checkpoint and offsets.
* ``query_id`` additionally carries the uid: it names one incarnation of the object (labels,
  metrics, the runtime's SLUICE_QUERY_ID).
* Kubernetes resource names are DNS-1123 labels (also valid DNS-1035: they start with a letter),
  at most ``MAX_BASE`` characters before the role suffix; longer or altered names are cut and get a
  hash suffix so two different queries never share a name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

#: length budget of the query part of resource names; the longest role suffix is "-driver" and the
#: driver Deployment's ReplicaSet adds "-<pod-template-hash>" (<= 10 chars) within 63; its pods add
#: "-<5 chars>" (the API server cuts generated names to fit).
MAX_BASE = 40
LABEL_MAX = 63
STATE_MOUNT = "/var/lib/sluice/state"
PLAN_MOUNT = "/etc/sluice/plan"
PLAN_FILE = "plan.json"
#: the plan ConfigMap's key of the query spec that compiled into the plan (what a rollback restores)
SPEC_FILE = "spec.json"
#: the executor pod template (JSON) a driver with executors hands to Spark's Kubernetes scheduler
EXECUTOR_POD_TEMPLATE_ENV = "SLUICE_EXECUTOR_POD_TEMPLATE"
#: what a standby driver does with executor pods (QueryCluster ``spec.standbyExecutors``:
#: ``hold``, the runtime's default when absent, or ``release``; ``sluice_runtime.standby_executors``)
STANDBY_EXECUTORS_ENV = "SLUICE_STANDBY_EXECUTORS"
#: where the runtime writes it (under its HOME/temporary directory) for ``podTemplateFile``
EXECUTOR_POD_TEMPLATE_CONF = "spark.kubernetes.executor.podTemplateFile"

_INVALID = re.compile(r"[^a-z0-9-]+")


def short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def dns_label(text: str, max_length: int = LABEL_MAX) -> str:
    """``text`` as a DNS-1123/1035 label of at most ``max_length`` characters.

    Unchanged when already valid and short enough; otherwise sanitized, cut and suffixed with a
    hash of the original text, so distinct inputs give distinct labels.
    """
    if max_length < 10:
        raise ValueError("max_length must leave room for a hash suffix")
    cleaned = _INVALID.sub("-", text.lower()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    if cleaned and not cleaned[0].isalpha():
        cleaned = "q" + cleaned
    if cleaned == text and len(cleaned) <= max_length:
        return cleaned
    suffix = short_hash(text)
    head = cleaned[: max_length - len(suffix) - 1].rstrip("-") or "q"
    return f"{head}-{suffix}"


@dataclass(frozen=True)
class QueryNames:
    """Names of the Kubernetes objects of one StreamingQuery."""

    base: str

    @classmethod
    def for_query(cls, name: str) -> QueryNames:
        return cls(base=dns_label(name, MAX_BASE))

    @property
    def driver(self) -> str:
        return f"{self.base}-driver"

    @property
    def backfill(self) -> str:
        """The Deployment and Lease of a replace's new version running beside the drivers."""
        return f"{self.base}-backfill"

    @property
    def state_claim(self) -> str:
        return f"{self.base}-state"

    @property
    def metrics_service(self) -> str:
        return f"{self.base}-metrics"

    @property
    def service_account(self) -> str:
        return f"{self.base}-spark"

    @property
    def role(self) -> str:
        return f"{self.base}-spark"

    @property
    def role_binding(self) -> str:
        return f"{self.base}-spark"

    @property
    def pdb(self) -> str:
        return f"{self.base}-driver"

    def plan_config_map(self, plan_hash: str) -> str:
        if len(plan_hash) < 12 or not re.fullmatch(r"[0-9a-f]+", plan_hash):
            raise ValueError(f"not a plan hash: {plan_hash!r}")
        return f"{self.base}-plan-{plan_hash[:12]}"


@dataclass(frozen=True)
class QueryIdentity:
    service_id: str
    namespace: str
    name: str
    uid: str
    plan_version: int
    #: where the checkpoints of every query live: the state volume's mount, or an object store's
    #: ``s3a://<bucket>[/<prefix>]`` (without a trailing slash)
    checkpoint_root: str = STATE_MOUNT

    def __post_init__(self) -> None:
        if self.plan_version < 1:
            raise ValueError("plan_version starts at 1")
        for field in ("service_id", "namespace", "name"):
            if not getattr(self, field):
                raise ValueError(f"{field} must not be empty")

    @property
    def _stem(self) -> str:
        return f"{self.service_id}.{self.namespace}.{self.name}"

    @property
    def consumer_group(self) -> str:
        return f"{self._stem}.v{self.plan_version}"

    @property
    def transactional_id(self) -> str:
        return f"{self._stem}.v{self.plan_version}.tx"

    @property
    def checkpoint_path(self) -> str:
        return f"{self.checkpoint_root}/{self.checkpoint_relative}"

    @property
    def checkpoint_relative(self) -> str:
        """The checkpoint's path under its root, the same on a volume and in an object store."""
        return f"{self.service_id}/{self.namespace}/{self.name}/v{self.plan_version}"

    @property
    def query_id(self) -> str:
        return f"{self._stem}.{self.uid[:8]}.v{self.plan_version}" if self.uid else self.consumer_group

    def versioned_topic(self, topic: str) -> str:
        """The output topic of this plan version beside ``topic`` (a replace with backfill writes
        there while the previous version keeps serving ``topic``): ``<topic>-v<version>``."""
        return topic if self.plan_version == 1 else f"{topic}-v{self.plan_version}"

    @property
    def names(self) -> QueryNames:
        return QueryNames.for_query(self.name)
