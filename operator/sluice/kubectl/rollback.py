"""``kubectl sluice rollback sq/NAME [--to HASH] [--dry-run]``: put the query of an earlier plan back.

Every plan ConfigMap keeps the query part of the spec that compiled into it (``spec.json``, written
by the operator beside ``plan.json``). Rollback reads the ConfigMap of the plan to return to and
merge-patches the StreamingQuery's query fields (sources, sql, sink, trigger, shufflePartitions)
back to it; the rest of the spec (upgrade, cleanup, suspend, resources, ...) stays. The operator
then classifies and carries out that edit like any other (in place or a replace, gated, rolled
back on failure); what it is expected to be is printed with ``kubectl sluice diff``'s logic.

The plan returned to: ``--to HASH`` (a prefix of a hash the status names, or 12 characters or
more); else, while an upgrade is in flight or waits, the plan that ran when it began (the edit
back cancels it); else the plan before the newest upgrade in ``status.history``
(``history[0].fromHash``: rolling back twice returns to where one started, like
``kubectl rollout undo``).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from sluice.kubectl.connection import PluginError, flags_parent
from sluice.kubectl.expect import short

#: rollout steps whose edit a rollback undoes (the rollout's ``fromHash`` is the plan to return to)
UNDONE_STEPS = frozenset({"Backfilling", "Applying", "Verifying", "RollingBack", "Failed", "AwaitingUpgrade",
                          "Rejected"})


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rollback", parents=[flags_parent()],
        help="patch a StreamingQuery back to the query of a previous plan",
        description="Patch the query fields of a StreamingQuery (sources, sql, sink, trigger, "
        "shufflePartitions) back to those that compiled into a previous plan, as kept in that plan's "
        "ConfigMap; the operator then carries the edit out like any other.",
    )
    parser.add_argument("query", metavar="sq/NAME", help="the StreamingQuery")
    parser.add_argument("--to", metavar="HASH", help="the plan to return to (default: the previous one)")
    parser.add_argument("--dry-run", action="store_true", help="print the merge patch only; change nothing")


def query_fields() -> tuple[str, ...]:
    """The spec fields the compiler reads (camelCase): what a rollback patches."""
    from sluice.core.spec import QuerySpec

    return tuple(info.alias or name for name, info in QuerySpec.model_fields.items())


def known_hashes(status: Mapping[str, Any]) -> list[str]:
    """Every plan hash the status names (pinned, rollout, last upgrade, history, versions)."""
    found: list[str] = []
    records = [status.get("plan") or {}, status.get("rollout") or {}, status.get("lastUpgrade") or {},
               *(status.get("history") or []), *(status.get("versions") or [])]
    for record in records:
        for key in ("hash", "fromHash", "toHash", "targetHash", "planHash"):
            value = record.get(key)
            if value and value not in found:
                found.append(str(value))
    return found


def resolve_hash(text: str, status: Mapping[str, Any]) -> str:
    """The plan hash ``--to`` names: a unique prefix of a hash the status names, or any hash of 12
    hexadecimal characters or more (its ConfigMap is found by the first 12)."""
    prefix = text.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{4,64}", prefix):
        raise PluginError(f"--to {text!r}: expected a plan hash (hexadecimal, at least 4 characters)")
    matches = [h for h in known_hashes(status) if h.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise PluginError(f"--to {text!r} matches several plans ({', '.join(short(h) for h in matches)}): "
                          f"give more characters")
    if len(prefix) >= 12:
        return prefix
    raise PluginError(f"--to {text!r}: no plan of the query's status starts with it; give 12 characters "
                      f"or more to look for its ConfigMap anyway")


def choose_target(status: Mapping[str, Any], to: str | None) -> tuple[str, str]:
    """The plan to return to, and why that one."""
    if to:
        return resolve_hash(to, status), "as asked with --to"
    rollout = status.get("rollout") or {}
    if rollout.get("step") in UNDONE_STEPS and rollout.get("fromHash"):
        return str(rollout["fromHash"]), (f"the plan that ran when the upgrade now {rollout['step']} began "
                                          f"(to plan {short(rollout.get('targetHash'))})")
    history = status.get("history") or []
    if not history:
        raise PluginError("no upgrade history (status.history is empty): there is no previous plan to roll "
                          "back to")
    newest = history[0]
    if not newest.get("fromHash"):
        raise PluginError("the newest upgrade in status.history names no plan it came from")
    return str(newest["fromHash"]), (f"the plan before the newest upgrade: {newest.get('time')}, "
                                     f"{short(newest.get('fromHash'))} → {short(newest.get('toHash'))}, "
                                     f"{newest.get('outcome')}")


def kept_spec(config_map: Mapping[str, Any]) -> dict[str, Any]:
    """The query spec a plan ConfigMap keeps (``spec.json``), checked with the query model;
    PluginError naming the ConfigMap, the key and the field when it is missing or wrong."""
    from pydantic import ValidationError

    from sluice.core.manifest import validation_problems
    from sluice.core.spec import QuerySpec
    from sluice.operator.builders.plan import SPEC_FILE

    name = (config_map.get("metadata") or {}).get("name")
    text = (config_map.get("data") or {}).get(SPEC_FILE)
    if text is None:
        raise PluginError(f"ConfigMap {name} has no {SPEC_FILE}: it was made by an operator version that did "
                          f"not keep the query spec beside the plan, so the SQL of that plan is not known "
                          f"(only the plan is); edit the spec by hand")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PluginError(f"ConfigMap {name}: {SPEC_FILE} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PluginError(f"ConfigMap {name}: {SPEC_FILE} is not a JSON object")
    try:
        QuerySpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{p.field}: {p.message}" for p in validation_problems(exc, "spec"))
        raise PluginError(f"ConfigMap {name}: {SPEC_FILE} is not a valid query spec: {problems}") from exc
    return {k: data[k] for k in query_fields() if k in data}


def spec_patch(live_spec: Mapping[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch (RFC 7386) of ``spec`` that gives the live query fields the meaning of
    ``kept``: only the fields whose value differs as the query model reads them (a default written
    out on one side and left out on the other is no difference), an object field by its own fields,
    a list (sources, sink key) whole, a field ``kept`` does not set as null; the fields outside the
    query are left out. Empty when they already mean the same."""
    from pydantic import ValidationError

    from sluice.core.spec import QuerySpec
    from sluice.core.status import merge_patch

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


def run(args: argparse.Namespace) -> int:
    from sluice.core.compiler import compile_query
    from sluice.core.errors import SluiceError
    from sluice.core.naming import QueryNames
    from sluice.crd.streamingquery import StreamingQuerySpec
    from sluice.kubectl import diff
    from sluice.kubectl.connection import connect, query_name

    name = query_name(args.query)
    session = connect(args)
    obj = session.query(name)
    status = obj.get("status") or {}
    target, why = choose_target(status, args.to)
    cm = session.plan_config_map(name, target)
    cm_name = QueryNames.for_query(name).plan_config_map(target)
    if cm is None and target in known_hashes(status):
        raise PluginError(f"the ConfigMap of plan {short(target)} ({cm_name}) is gone: the clean-up of "
                          f"retired versions removes plan ConfigMaps that no kept version needs "
                          f"(spec.cleanup), and the query spec of that plan was kept nowhere else")
    if cm is None:
        raise PluginError(f"no ConfigMap of plan {short(target)} ({cm_name}): the status of sq/{name} names "
                          f"no such plan, and if the query had it, the clean-up removed its ConfigMap")
    cm_name = str(cm["metadata"]["name"])
    kept = kept_spec(cm)
    live_spec = obj.get("spec") or {}
    patch = spec_patch(live_spec, kept)
    if not patch:
        print(f"sq/{name}: the spec already holds the query of plan {short(target)} ({why}): nothing to "
              f"patch")
        return 0
    if args.dry_run:
        print(json.dumps({"spec": patch}, indent=2))
        return 0
    new_spec = apply_merge_patch(live_spec, patch)
    try:
        plan = compile_query(StreamingQuerySpec.model_validate(new_spec).query())
    except (SluiceError, ValueError) as exc:
        raise PluginError(f"the query kept in ConfigMap {cm_name} does not compile any more: {exc}") from exc
    new_hash = plan.hash or plan.compute_hash()
    expected = diff.expected(session, name, obj, new_spec, plan, new_hash)  # before the edit, as it is seen
    session.patch_query(name, {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                               "spec": patch})
    print(f"sq/{name}: spec patched back to the query of plan {short(target)} (ConfigMap {cm_name}; {why}); "
          f"fields: {', '.join(sorted(patch))}")
    if not new_hash.startswith(target):
        print(f"note: with this version of sluice that query compiles to plan {short(new_hash)}")
    print("the operator classifies and carries out the edit like any other; expected:")
    print(diff.render(expected, cm_name))
    return 0
