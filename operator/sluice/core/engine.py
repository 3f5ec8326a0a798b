"""The engine a query runs on, what a plan is compiled from, and what changing either means (pure).

A query's **plan** is what it computes; its **engine** is what executes the plan: the runtime
image, the Spark it carries, the Spark settings, the pods' resources and the Kafka connection (the
QueryCluster fields that reach the pods, ``sluice.crd.querycluster.Engine``). Both are pinned per
query in its status. Neither changes under a running query unless the user changes something:

* :func:`plan_inputs` digests what a plan is compiled from (the query part of the spec as the user
  wrote it, and the engine fields that enter plans: the Spark line and the pinned Spark settings).
  While the digest matches the pinned plan's, the pinned plan is kept, whatever the operator's
  compiler would produce now (a new compiler's plan is offered as a re-plan, never carried out on
  its own);
* :func:`engine_changes` classifies a change of engine, which the operator carries out as an
  upgrade (health gate, rollback, a checkpoint backstop before the first batch on the new engine).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.core import sparkversion
from sluice.core.classify.comparison import TRANSPARENT, fmt
from sluice.core.classify.model import Change, change
from sluice.core.plan import meaning
from sluice.core.records import PlanInputs
from sluice.core.spec import QuerySpec


@dataclass(frozen=True)
class EngineFacts:
    """An engine as the core compares it: its digest, image, Spark version and settings, and every
    other field that reaches the pods, flattened (``driver.limits.memory``)."""

    digest: str
    image: str
    spark_version: str
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    workload: Mapping[str, Any] = field(default_factory=dict)

    @property
    def plan_conf(self) -> dict[str, str]:
        """The Spark settings that enter plans."""
        return {k: v for k, v in self.spark_conf.items() if meaning.is_pinned(k)}


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def query_digest(query: QuerySpec) -> str:
    """The digest of the query part of a spec as the user wrote it (fields left at their defaults are
    left out)."""
    return _digest(query.model_dump(mode="json", by_alias=True, exclude_defaults=True))


def plan_inputs(query: QuerySpec, engine: EngineFacts) -> PlanInputs:
    """The digests of what a plan of ``query`` on ``engine`` is compiled from.

    The query part is digested as the user wrote it: fields left at their defaults are left out, so
    that an operator whose models gain a field (with a default) reads the same inputs; a default
    that changes reaches the plan only through a re-plan the user accepts. The engine part is the
    Spark line (a patch release compiles the same plan) and the Spark settings that enter plans."""
    engine_part = {"sparkLine": sparkversion.line(engine.spark_version), "conf": engine.plan_conf}
    return PlanInputs(query=query_digest(query), engine=_digest(engine_part))


#: the engine field that says where checkpoints live (absent: the state volume); never moved under a query
CHECKPOINT_STORE = "objectStore.uri"


def engine_changes(old: EngineFacts, new: EngineFacts) -> list[Change]:
    """What a change of engine needs: one change per field that differs.

    The Spark version follows :func:`sluice.core.sparkversion.move`; everything else (image, pull
    policy, settings outside the plan, resources, executors, drain budget, Kafka connection) changes
    how the plan runs, not what it computes: ``transparent``, carried out in place. Spark settings
    that enter the plan are left to the plan comparison (a change of one re-plans the query). Where
    the checkpoints live (``storage.objectStore.uri``, or the state volume) cannot change under a
    query: ``unsupported``, the query stays on its engine."""
    out: list[Change] = []
    if old.spark_version != new.spark_version:
        moved = sparkversion.move(old.spark_version, new.spark_version)
        out.append(change("transparent" if moved.allowed else "unsupported", "engine", "sparkVersion",
                          old.spark_version, new.spark_version,
                          f"The engine's Spark changes: {moved.message}."))
    if old.image != new.image:
        out.append(change("transparent", "engine", "image", old.image, new.image,
                          f"The runtime image changes from {fmt(old.image)} to {fmt(new.image)}: a driver on "
                          f"the new image takes over on the same checkpoint after warming up, behind the "
                          f"health gate; the checkpoint is kept as a backstop before its first batch. "
                          f"{TRANSPARENT}"))
    for key in sorted(set(old.spark_conf) | set(new.spark_conf)):
        a, b = old.spark_conf.get(key), new.spark_conf.get(key)
        if a != b and not meaning.is_pinned(key):
            out.append(change("transparent", "engine", f"sparkConf.{key}", a, b,
                              f"Spark setting {key} changes from {fmt(a)} to {fmt(b)}; it does not change "
                              f"what the query computes. {TRANSPARENT}"))
    for key in sorted(set(old.workload) | set(new.workload)):
        a, b = old.workload.get(key), new.workload.get(key)
        if a != b and key == CHECKPOINT_STORE:
            out.append(change("unsupported", "engine", "storage.objectStore.uri", a, b,
                              f"QueryCluster storage.objectStore.uri changes from "
                              f"{fmt(a or 'the state volume')} to {fmt(b or 'the state volume')}: the "
                              f"query's checkpoint (its offsets and state) stays where it started, so the "
                              f"query stays on its engine; queries created from now on use the new storage "
                              f"(revert the field to let this query follow the cluster's other changes)."))
        elif a != b:
            out.append(change("transparent", "engine", key, a, b,
                              f"QueryCluster {key} changes from {fmt(a)} to {fmt(b)}: the drivers restart "
                              f"with it on the same checkpoint. {TRANSPARENT}"))
    return out


def rewrites_checkpoint(old: EngineFacts, new: EngineFacts) -> bool:
    """Whether the new engine may write the checkpoint in a way the old one cannot read back: another
    image or another Spark. A rollback from such an engine restores the backstop taken before its
    first batch; from any other (settings, resources) it hands back on the current checkpoint."""
    return old.image != new.image or old.spark_version != new.spark_version
