"""Rollback to an earlier plan's query: the plan ConfigMap that keeps it, the checked spec patch, and
the operator's answer to a rollback request (the Argo CD ``rollback`` action's annotation).

The choice of the plan and the patch are :mod:`sluice.core.rollback`'s; ``kubectl sluice rollback``
uses :func:`prepare` too, and patches the spec itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.core.compiler import CompileTarget
from sluice.core.compiler.registry import plan_source_schemas
from sluice.core.errors import SluiceError
from sluice.core.naming import PLAN_FILE, QueryNames
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.records import QueryRecords
from sluice.core.rollback import (
    ROLLBACK_DONE,
    ROLLBACK_RESULT,
    RollbackError,
    apply_merge_patch,
    choose_target,
    kept_spec,
    missing_config_map,
    pending_request,
    spec_patch,
)
from sluice.core.spec import QuerySpec
from sluice.core.status import SHORT_HASH_LENGTH, EventReason
from sluice.core.status import short_hash as short
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.builders.plan import PLAN_HASH_KEY
from sluice.operator.env import Env
from sluice.operator.kube import Kube, KubeError

log = logging.getLogger("sluice.operator")


def find_plan_config_map(kube: Kube, namespace: str, query: str, plan_hash: str) -> dict[str, Any] | None:
    """The ConfigMap of plan ``plan_hash`` (12 characters or more) of query ``query``: by its name,
    else by its labels (a ConfigMap named otherwise by an earlier operator). RollbackError when the
    ConfigMap found holds another plan."""
    names = QueryNames.for_query(query)
    found = kube.get("ConfigMap", namespace, names.plan_config_map(plan_hash))
    if found is None:
        selector = f"sluice.dev/query={names.base},{PLAN_HASH_KEY}={plan_hash[:SHORT_HASH_LENGTH]}"
        items = kube.list("ConfigMap", namespace, selector)
        found = items[0] if items else None
    if found is not None:
        full = (found["metadata"].get("annotations") or {}).get(PLAN_HASH_KEY)
        if full and not str(full).startswith(plan_hash):
            raise RollbackError(f"ConfigMap {found['metadata']['name']} holds plan {full}, not {plan_hash}")
    return found


@dataclass(frozen=True)
class Prepared:
    """A rollback worked out and checked, not yet written."""

    target: str  # the plan returned to
    why: str  # why that plan
    config_map: str  # the ConfigMap that kept its query
    patch: dict[str, Any]  # the merge patch of ``spec`` ({}: the spec holds that query already)
    new_spec: dict[str, Any]  # the spec with the patch applied
    plan: Plan | None  # what the new spec compiles to (None: no patch)
    new_hash: str | None


def _kept_schemas(cm: dict[str, Any]) -> dict[str, RegistrySchema]:
    """The registry schemas the kept plan's avro sources pinned (its query compiles with them)."""
    text = (cm.get("data") or {}).get(PLAN_FILE)
    try:
        return plan_source_schemas(Plan.from_json(text)) if text else {}
    except ValueError:
        return {}


def prepare(kube: Kube, obj: dict[str, Any], to: str | None = None,
            compile_query: Callable[[QuerySpec, CompileTarget], Plan] | None = None) -> Prepared:
    """The rollback of StreamingQuery ``obj`` to plan ``to`` (None: the previous plan), checked:
    the kept query is valid and the spec it gives compiles (an avro source with the schema the kept
    plan pinned). RollbackError says why not."""
    from sluice.core.compiler import compile_query as default_compile

    compile_spec = compile_query or default_compile
    meta, records = obj["metadata"], QueryRecords.of(obj.get("status"))
    target, why = choose_target(records, to)
    cm = find_plan_config_map(kube, meta["namespace"], meta["name"], target)
    if cm is None:
        expected = QueryNames.for_query(meta["name"]).plan_config_map(target)
        raise RollbackError(missing_config_map(target, expected, records, meta["name"]))
    cm_name = str(cm["metadata"]["name"])
    live_spec = obj.get("spec") or {}
    patch = spec_patch(live_spec, kept_spec(cm))
    if not patch:
        return Prepared(target, why, cm_name, {}, dict(live_spec), None, None)
    new_spec = apply_merge_patch(live_spec, patch)
    try:
        plan = compile_spec(StreamingQuerySpec.model_validate(new_spec).query(),
                            CompileTarget(schemas=_kept_schemas(cm)))
    except (SluiceError, ValueError) as exc:
        raise RollbackError(f"the query kept in ConfigMap {cm_name} does not compile any more: "
                            f"{exc}") from exc
    return Prepared(target, why, cm_name, patch, new_spec, plan, plan.hash or plan.compute_hash())


def honour_request(env: Env, obj: dict[str, Any]) -> dict[str, Any]:
    """Answer the rollback request annotated on ``obj``, if one waits: in one patch (only if nobody
    changed the object since it was read), the spec patched back to the previous plan's query, the
    request marked done and what was done; an event says it. A rollback that cannot be done, or
    that the API server refuses (the admission webhook: a replace ``allowReplace: false``
    forbids), changes no spec: the result annotation and a warning event say why. Returns the
    object as it is now."""
    meta = obj["metadata"]
    request = pending_request(meta.get("annotations"))
    if request is None or meta.get("deletionTimestamp"):
        return obj
    try:
        done = prepare(env.kube, obj, compile_query=env.compile)
    except RollbackError as exc:
        return _answer(env, obj, request, f"refused: {exc}")
    if not done.patch:
        holds = f"the spec holds the query of plan {short(done.target)} ({done.why})"
        return _answer(env, obj, request, f"nothing to patch: {holds}")
    result = (f"spec patched back to the query of plan {short(done.target)} (ConfigMap {done.config_map}; "
              f"{done.why}); fields: {', '.join(sorted(done.patch))}")
    try:
        return _answer(env, obj, request, result, done.patch)
    except KubeError as exc:
        if exc.status not in (400, 403, 422):
            raise
        message = exc.body.get("message") if isinstance(exc.body, dict) else str(exc.body)[:300]
        return _answer(env, obj, request, f"refused: the API server refused the spec patch back to plan "
                                          f"{short(done.target)}: {message}")


def _answer(env: Env, obj: dict[str, Any], request: str, result: str,
            spec_patch: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the answer (and the spec patch), post the event; the object as it is now."""
    meta = obj["metadata"]
    body: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {
        ROLLBACK_DONE: request, ROLLBACK_RESULT: result}}}
    if spec_patch:
        body["spec"] = spec_patch
    try:
        updated = env.kube.patch("StreamingQuery", meta["namespace"], meta["name"], body)
    except KubeError as exc:
        if exc.status == 409:  # edited meanwhile: the next reconcile reads it again and answers then
            log.info("%s/%s changed while its rollback request was answered; again on the next event",
                     meta["namespace"], meta["name"])
            return env.kube.get("StreamingQuery", meta["namespace"], meta["name"]) or obj
        raise
    refused = result.startswith("refused")
    reason = EventReason.ROLLBACK_REFUSED if refused else EventReason.ROLLBACK_REQUESTED
    env.events(obj, "Warning" if refused else "Normal", str(reason), f"rollback request {request}: {result}")
    log.info("%s/%s rollback request %s: %s", meta["namespace"], meta["name"], request, result)
    return updated
