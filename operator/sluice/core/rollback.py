"""Rollback to the query of an earlier plan (pure): which plan, and the spec patch that returns to it.

Every plan ConfigMap keeps the query part of the spec that compiled into it (``spec.json``, written
by the operator beside ``plan.json``). A rollback merge-patches the StreamingQuery's query fields
(sources, sql, sink, trigger, shufflePartitions) back to those of the plan it returns to; the rest
of the spec (upgrade, cleanup, suspend, resources, ...) stays. The operator then classifies and
carries out that edit like any other (in place or a replace, gated, rolled back on failure).

The plan returned to: a hash asked for (a prefix of a hash the status names, or 12 characters or
more); else, while an upgrade is in flight or waits, the plan that ran when it began (the edit
back cancels it); else the plan before the newest upgrade in ``status.history``
(``history[0].fromHash``: rolling back twice returns to where one started, like
``kubectl rollout undo``).

Two clients ask for it: ``kubectl sluice rollback`` patches the spec itself, and the Argo CD
``rollback`` action (which can only edit the object it runs on) writes :data:`ROLLBACK_REQUEST`;
the operator honours a request once, writing the spec patch, :data:`ROLLBACK_DONE` (the request it
answered) and :data:`ROLLBACK_RESULT` (what it did, or why it could not) in one patch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from sluice.core.manifest import validation_problems
from sluice.core.naming import SPEC_FILE
from sluice.core.records import QueryRecords
from sluice.core.rollout import REVERTIBLE, WAITING, Step
from sluice.core.spec import QuerySpec
from sluice.core.status import merge_patch
from sluice.core.status import short_hash as short

#: the annotation that asks the operator for a rollback to the previous plan (any new value: one
#: request; the Argo CD action writes the time)
ROLLBACK_REQUEST = "sluice.dev/rollback-request"
#: the request the operator answered last (a request equal to it is done)
ROLLBACK_DONE = "sluice.dev/rollback-done"
#: what the operator did about that request, one sentence
ROLLBACK_RESULT = "sluice.dev/rollback-result"

#: rollout steps whose edit a rollback undoes (the rollout's ``fromHash`` is the plan to return to)
UNDONE_STEPS = frozenset({*REVERTIBLE, *WAITING, Step.ROLLING_BACK, Step.FAILED})


class RollbackError(ValueError):
    """A rollback that cannot be done; the message says why and what to do instead."""


def pending_request(annotations: Mapping[str, Any] | None) -> str | None:
    """The rollback request the operator has not answered yet, if any."""
    found = (annotations or {}).get(ROLLBACK_REQUEST)
    if not found or found == (annotations or {}).get(ROLLBACK_DONE):
        return None
    return str(found)


def query_fields() -> tuple[str, ...]:
    """The spec fields the compiler reads (camelCase): what a rollback patches."""
    return tuple(info.alias or name for name, info in QuerySpec.model_fields.items())


def known_hashes(records: QueryRecords) -> list[str]:
    """Every plan hash the status names (pinned, rollout, last upgrade, history, versions)."""
    named: list[str | None] = []
    if records.plan is not None:
        named.append(records.plan.hash)
    if records.rollout is not None:
        named += [records.rollout.from_hash, records.rollout.target_hash]
    for upgrade in [*([records.last_upgrade] if records.last_upgrade else []), *records.history]:
        named += [upgrade.from_hash, upgrade.to_hash]
    named += [v.plan_hash for v in records.versions]
    found: list[str] = []
    for value in named:
        if value and value not in found:
            found.append(value)
    return found


def resolve_hash(text: str, records: QueryRecords) -> str:
    """The plan hash ``text`` names: a unique prefix of a hash the status names, or any hash of 12
    hexadecimal characters or more (its ConfigMap is found by the first 12)."""
    prefix = text.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{4,64}", prefix):
        raise RollbackError(f"--to {text!r}: expected a plan hash (hexadecimal, at least 4 characters)")
    matches = [h for h in known_hashes(records) if h.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise RollbackError(f"--to {text!r} matches several plans ({', '.join(short(h) for h in matches)}): "
                            f"give more characters")
    if len(prefix) >= 12:
        return prefix
    raise RollbackError(f"--to {text!r}: no plan of the query's status starts with it; give 12 characters "
                        f"or more to look for its ConfigMap anyway")


def choose_target(records: QueryRecords, to: str | None = None) -> tuple[str, str]:
    """The plan to return to, and why that one."""
    if to:
        return resolve_hash(to, records), "as asked with --to"
    rollout = records.rollout
    if rollout is not None and rollout.step in UNDONE_STEPS and rollout.from_hash:
        return rollout.from_hash, (f"the plan that ran when the upgrade now {rollout.step} began "
                                   f"(to plan {short(rollout.target_hash)})")
    if not records.history:
        raise RollbackError("no upgrade history (status.history is empty): there is no previous plan to roll "
                            "back to")
    newest = records.history[0]
    if not newest.from_hash:
        raise RollbackError("the newest upgrade in status.history names no plan it came from")
    return newest.from_hash, (f"the plan before the newest upgrade: {newest.time}, "
                              f"{short(newest.from_hash)} → {short(newest.to_hash)}, {newest.outcome}")


def missing_config_map(target: str, config_map: str, records: QueryRecords, query: str) -> str:
    """Why no ConfigMap of plan ``target`` (named ``config_map``) was found."""
    if target in known_hashes(records):
        return (f"the ConfigMap of plan {short(target)} ({config_map}) is gone: the clean-up of retired "
                f"versions removes plan ConfigMaps that no kept version needs (spec.cleanup), and the query "
                f"spec of that plan was kept nowhere else")
    return (f"no ConfigMap of plan {short(target)} ({config_map}): the status of sq/{query} names no such "
            f"plan, and if the query had it, the clean-up removed its ConfigMap")


def kept_spec(config_map: Mapping[str, Any]) -> dict[str, Any]:
    """The query spec a plan ConfigMap keeps (``spec.json``), checked with the query model;
    RollbackError naming the ConfigMap, the key and the field when it is missing or wrong."""
    name = (config_map.get("metadata") or {}).get("name")
    text = (config_map.get("data") or {}).get(SPEC_FILE)
    if text is None:
        raise RollbackError(f"ConfigMap {name} has no {SPEC_FILE}: it was made by an operator version that "
                            f"did not keep the query spec beside the plan, so the SQL of that plan is not "
                            f"known (only the plan is); edit the spec by hand")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RollbackError(f"ConfigMap {name}: {SPEC_FILE} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RollbackError(f"ConfigMap {name}: {SPEC_FILE} is not a JSON object")
    try:
        QuerySpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{p.field}: {p.message}" for p in validation_problems(exc, "spec"))
        raise RollbackError(f"ConfigMap {name}: {SPEC_FILE} is not a valid query spec: {problems}") from exc
    return {k: data[k] for k in query_fields() if k in data}


def spec_patch(live_spec: Mapping[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch (RFC 7386) of ``spec`` that gives the live query fields the meaning of
    ``kept``: only the fields whose value differs as the query model reads them (a default written
    out on one side and left out on the other is no difference), an object field by its own fields,
    a list (sources, sink key) whole, a field ``kept`` does not set as null; the fields outside the
    query are left out. Empty when they already mean the same."""
    fields = query_fields()
    live = {k: live_spec[k] for k in fields if k in live_spec}
    target = {k: kept.get(k) for k in fields}
    try:
        return _model_patch(live, target, QuerySpec.model_validate(live), QuerySpec.model_validate(target))
    except ValidationError:  # a live spec the model refuses: compare as written
        return merge_patch(live, target)


def _model_patch(live: Mapping[str, Any], kept: Mapping[str, Any], live_model: BaseModel,
                 kept_model: BaseModel) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for name, info in type(kept_model).model_fields.items():
        key = info.alias or name
        before, after = getattr(live_model, name), getattr(kept_model, name)
        if before == after:
            continue
        models = isinstance(before, BaseModel) and isinstance(after, BaseModel)
        if models and isinstance(live.get(key), Mapping) and isinstance(kept.get(key), Mapping):
            patch[key] = _model_patch(live[key], kept[key], before, after)
        else:
            patch[key] = kept.get(key)
    return patch


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """``doc`` with the merge patch ``patch`` applied (RFC 7386)."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(doc) if isinstance(doc, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out
