"""What a reconcile runs a query on: the engine (pinned, or the QueryCluster's once its wave admits the
query) and the plan (pinned, unless the user changed what it is compiled from or accepted a re-plan).

Decisions are pure (``sluice.core.engine``, ``sluice.core.pinning``, ``sluice.core.fleet``); this
module reads the status, the QueryCluster and the pinned plan's ConfigMap, and compiles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sluice import __version__
from sluice.core import pinning
from sluice.core.compiler import CompileTarget, source_subjects
from sluice.core.compiler.registry import KeptSchemas, kept_source_schemas, plan_source_schemas
from sluice.core.engine import plan_inputs, query_digest
from sluice.core.errors import CompileError
from sluice.core.naming import PLAN_FILE, SPEC_FILE, QueryNames
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.records import EngineRef, PinnedPlan, PlanInputs, Replan
from sluice.core.rollback import known_hashes
from sluice.core.spec import QuerySpec, UpgradePolicy
from sluice.crd.engine import Engine
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.builders.context import default_image
from sluice.operator.env import QueryRun, Retry

Cause = Literal["spec", "cluster", "replan"]


@dataclass(frozen=True)
class Engines:
    """The engine the drivers run on (``stable``) and the one the reconcile moves them to
    (``desired``: the QueryCluster's, once its rollout admits the query; else the stable one)."""

    stable: Engine
    desired: Engine
    #: why the QueryCluster's engine is not the desired one yet
    waiting: str | None = None

    @property
    def changes(self) -> bool:
        return self.stable.compute_digest() != self.desired.compute_digest()


def engine_of(recorded: EngineRef | None) -> Engine | None:
    """The engine snapshot a status record holds (None: none recorded)."""
    return Engine.model_validate(recorded.for_storage()).snapshot() if recorded else None


def with_pinned_service(run: QueryRun, cluster: QueryClusterSpec) -> QueryClusterSpec:
    """The cluster with the serviceId pinned in the query's status at creation: a changed serviceId
    must not move a running query's consumer group, transactional id and checkpoint (that would
    silently drop its state)."""
    pinned = (run.status.get("identity") or {}).get("serviceId")
    if not pinned or pinned == cluster.service_id:
        return cluster
    return cluster.model_copy(update={"service_id": pinned})


def engines(run: QueryRun, cluster: QueryClusterSpec, cluster_obj: dict[str, Any]) -> Engines:
    now = cluster.engine(default_image())
    stable = engine_of(run.records.engine)
    if stable is None:  # a new query starts on the cluster's engine
        return Engines(now, now)
    target = now.compute_digest()
    if stable.compute_digest() == target:
        return Engines(stable, stable)
    rollout = run.records.rollout
    if rollout is not None and rollout.target_engine is not None and rollout.target_engine.digest == target:
        return Engines(stable, now)  # its rollout is under way
    fleet = (cluster_obj.get("status") or {}).get("rollout") or {}
    if fleet.get("target") == target and run.name in (fleet.get("admitted") or []):
        return Engines(stable, now)
    if fleet.get("target") == target and fleet.get("state") == "Halted":
        why = f"the QueryCluster's rollout is halted: {fleet.get('message')}"
    else:
        why = "waiting for the QueryCluster's rollout to admit this query (the QueryCluster's status.rollout)"
    return Engines(stable, stable, f"{why}; the drivers run on engine {stable.compute_digest()[:12]} "
                   f"({stable.image}, Spark {stable.spark_version})")


@dataclass(frozen=True)
class Desired:
    """The plan a reconcile asks for, what it is compiled from, and any re-plan on offer."""

    plan: Plan
    inputs: PlanInputs
    cause: Cause
    replan: Replan | None = None

    @property
    def hash(self) -> str:
        return self.plan.hash or self.plan.compute_hash()


def target_of(engine: Engine, schemas: Mapping[str, RegistrySchema] | None = None) -> CompileTarget:
    return CompileTarget(spark_version=engine.spark_version, spark_conf=dict(engine.spark_conf),
                         schemas=dict(schemas or {}))


#: the latest registry schema of each avro source subject of a query (I/O: ``sluice.operator.schemas``)
Resolver = Callable[[QuerySpec], Mapping[str, RegistrySchema]]


def desired_plan(run: QueryRun, spec: StreamingQuerySpec, engs: Engines, policy: UpgradePolicy,
                 resolve: Resolver | None = None) -> Desired:
    """The plan to run. Raises :class:`CompileError` only for a spec the user changed. A plan of a query
    the user changed pins the latest schema of each avro source subject (``resolve``); a kept plan, the
    plan of an unchanged query on a new engine, and the plan of a query a version ran before (a
    rollback, an edit undone) keep the ones that plan pinned (``kept_source_schemas``)."""
    query = spec.query()
    engine = engs.desired
    inputs = plan_inputs(query, engine.facts())
    pinned = run.records.plan
    if pinned is not None and pinned.inputs == inputs:
        return _kept(run, query, engine, pinned, inputs, policy)
    schemas: Mapping[str, RegistrySchema] = {}
    subjects = source_subjects(query)
    if subjects:  # a query a plan ran before (only the engine moved on, a rollback): that plan's schemas
        kept = kept_source_schemas(inputs.query, subjects, _kept_versions(run, pinned, inputs.query))
        if kept is not None:
            schemas = kept
        elif resolve is not None:
            schemas = resolve(query)
    plan = run.env.compile(query, target_of(engine, schemas))
    return Desired(plan, inputs, "cluster" if engs.changes else "spec")


def _kept_versions(run: QueryRun, pinned: PinnedPlan | None, query: str) -> Iterator[KeptSchemas]:
    """The plans the query ran before, read one at a time (the pinned one first, read only when its
    query is ``query``; then each plan its status names whose ConfigMap is still there): the digest of
    the query each was compiled from and the source schemas it pinned."""
    seen: set[str] = set()
    if pinned is not None:
        seen.add(pinned.config_map)
        if pinned.inputs is not None and pinned.inputs.query == query:  # only the engine moved on
            yield KeptSchemas(pinned.inputs.query, plan_source_schemas(load_plan(run, pinned.config_map)))
    records = run.records
    names = QueryNames.for_query(run.name)
    config_maps: list[str] = []
    for plan_hash in known_hashes(records):  # the rollout's target early: read first while one is in flight
        try:
            config_maps.append(names.plan_config_map(plan_hash))
        except ValueError:  # not a plan hash
            continue
    for name in [*config_maps, *(v.config_map for v in records.versions)]:
        if name in seen:
            continue
        seen.add(name)
        cm = run.env.kube.get("ConfigMap", run.ns, name)
        data = (cm or {}).get("data") or {}
        try:
            digest = query_digest(QuerySpec.model_validate_json(data[SPEC_FILE]))
            plan = Plan.from_json(data[PLAN_FILE])
        except (KeyError, ValueError):  # gone, or kept by an operator that did not keep the spec
            continue
        yield KeptSchemas(digest, plan_source_schemas(plan))


def _kept(run: QueryRun, query: QuerySpec, engine: Engine, pinned: PinnedPlan,
          inputs: PlanInputs, policy: UpgradePolicy) -> Desired:
    """The pinned plan stays; this compiler's plan of the same spec (with the source schemas the pinned
    plan pinned) is offered, or carried out when the user accepted exactly it."""
    compiler = __version__
    schemas = plan_source_schemas(load_plan(run, pinned.config_map)) if source_subjects(query) else {}
    try:
        current: Plan | None = run.env.compile(query, target_of(engine, schemas))
    except CompileError as exc:
        current, refused = None, "; ".join(p.render() for p in exc.problems)
    if current is not None and current.hash != pinned.hash:
        annotation = (run.body["metadata"].get("annotations") or {}).get(pinning.REPLAN_ANNOTATION)
        if pinning.accepts(annotation, current.hash):
            return Desired(current, inputs, "replan")
    plan = load_plan(run, pinned.config_map)
    if current is None:
        return Desired(plan, inputs, "spec", pinning.refused_record(refused, compiler))
    if current.hash == pinned.hash:
        return Desired(plan, inputs, "spec")
    decision = run.env.classify(plan, current, policy)
    return Desired(plan, inputs, "spec", pinning.replan_record(decision, current.hash, compiler))


def plan_of(run: QueryRun, config_map: str | None) -> Plan | None:
    """The plan in ``config_map`` as the API server has it now (None when the ConfigMap is gone)."""
    text = _config_map_file(run, config_map or "", PLAN_FILE)
    return Plan.from_json(text) if text is not None else None


def load_plan(run: QueryRun, config_map: str) -> Plan:
    """The plan pinned in ``config_map`` (immutable: read once per operator process)."""
    key = (run.ns, config_map)
    cached = run.env.plans.get(key)
    if cached is not None:
        return cached
    plan = plan_of(run, config_map)
    if plan is None:
        raise Retry(f"the pinned plan's ConfigMap {config_map} is missing or has no {PLAN_FILE}", 30)
    run.env.plans[key] = plan
    return plan


def _config_map_file(run: QueryRun, name: str, file: str) -> str | None:
    cm = run.env.kube.get("ConfigMap", run.ns, name) if name else None
    data = (cm or {}).get("data") or {}
    return str(data[file]) if file in data else None
