"""``kubectl sluice diff -f FILE``: what applying a StreamingQuery manifest would do to the live query.

The manifest is compiled as the operator compiles it and classified against the plan the live
query's workload runs (read from its pinned plan ConfigMap), under the manifest's ``spec.upgrade``
or else the QueryCluster's, exactly as the operator classifies an edit
(:mod:`sluice.kubectl.expect`); the spec fields outside the plan (resources, restartNonce, sink
topic settings) are compared too, as ``sluice diff`` does. Output like ``sluice diff``, plus what
the operator then does. An avro sink whose schema changes is checked against its subject by the
registry at ``$SLUICE_SCHEMA_REGISTRY_URL``, as ``sluice diff`` and the admission webhook check it
(under the versioned topic's subjects, value and key, for a replace with backfill: the live query's
plan version is known here): an incompatible schema makes the decision ``reject``, with the registry's reason.
Exit 0 for any valid manifest (also for ``reject``); 1 with ``FILE: line L, column C: message`` when it
does not load or compile or the sink's changed avro schema cannot be checked, or ``error: ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.kubectl.connection import PluginError, Session, flags_parent


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff", parents=[flags_parent()],
        help="classify a manifest against the live query's pinned plan",
        description="Compile a StreamingQuery manifest and classify it against the plan the live "
        "query runs, as the operator will: none, in-place, replace or reject, with the reasons. "
        "A query that does not exist yet would be created.",
    )
    parser.add_argument("-f", "--filename", required=True, metavar="FILE",
                        help="StreamingQuery manifest ('-' reads stdin)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


@dataclass(frozen=True)
class Manifest:
    name: str
    namespace: str | None
    spec: dict[str, Any]
    plan: Any  # sluice.core.plan.model.Plan
    hash: str


def load_manifest(text: str) -> Manifest:
    """Parse, validate (the CRD's model: field names in the problems) and compile one manifest;
    raises ``SluiceError`` (``ManifestError`` / ``CompileError``)."""
    from pydantic import ValidationError

    from sluice.commands.registry import compile_with_registry
    from sluice.core.errors import ManifestError
    from sluice.core.manifest import parse_manifest, validation_problems
    from sluice.crd.streamingquery import StreamingQuerySpec

    manifest = parse_manifest(text)
    spec = dict(manifest.raw["spec"])
    try:
        full = StreamingQuerySpec.model_validate(spec)
    except ValidationError as exc:
        raise ManifestError(validation_problems(exc, "spec")) from exc
    plan = compile_with_registry(full.query())
    namespace = (manifest.raw.get("metadata") or {}).get("namespace")
    return Manifest(manifest.name, str(namespace) if namespace else None, spec, plan,
                    plan.hash or plan.compute_hash())


def as_the_operator_plans(session: Session, manifest: Manifest, live: dict[str, Any] | None) -> Manifest:
    """The manifest's plan as the operator derives it for ``live``: compiled for the engine the query
    runs on; the pinned plan itself when the query part of the spec is unchanged (an operator never
    re-plans an unchanged query on its own: a re-plan on offer is in ``status.plan.replan``)."""
    from sluice.commands.registry import compile_with_registry
    from sluice.core.admission import SpecModels, compile_target, same_inputs
    from sluice.core.naming import PLAN_FILE
    from sluice.core.plan.model import Plan
    from sluice.crd.querycluster import QueryClusterSpec
    from sluice.crd.streamingquery import StreamingQuerySpec

    if live is None:
        return manifest
    status = live.get("status") or {}
    query = StreamingQuerySpec.model_validate(manifest.spec).query()
    pinned = status.get("plan") or {}
    models = SpecModels(query=StreamingQuerySpec, cluster=QueryClusterSpec)
    if pinned.get("hash") and same_inputs(models, live, query):
        cm = session.config_map(str(pinned.get("configMap") or ""))
        text = ((cm or {}).get("data") or {}).get(PLAN_FILE)
        if text is not None:
            return Manifest(manifest.name, manifest.namespace, manifest.spec, Plan.from_json(text),
                            str(pinned["hash"]))
    plan = compile_with_registry(query, compile_target(status))
    return Manifest(manifest.name, manifest.namespace, manifest.spec, plan, plan.hash or plan.compute_hash())


def spec_differs(live_spec: Mapping[str, Any] | None, new_spec: Mapping[str, Any]) -> bool:
    """Whether applying ``new_spec`` changes the live spec (compared as the model reads them, so
    the defaults the API server filled in do not count)."""
    from pydantic import ValidationError

    from sluice.crd.streamingquery import StreamingQuerySpec

    try:
        return StreamingQuerySpec.model_validate(dict(live_spec or {})) != StreamingQuerySpec.model_validate(
            dict(new_spec))
    except ValidationError:
        return True


def expected(session: Session, name: str, live: dict[str, Any] | None, spec: Mapping[str, Any],
             plan: Any, plan_hash: str, ask_registry: bool = False) -> dict[str, Any]:
    """What the operator does once ``spec`` (compiled: ``plan``) is applied to ``live``: the
    classification (``sluice diff -o json``'s keys) and the operator's side, as one JSON object.
    ``ask_registry``: check an avro sink's changed schema with the registry (:func:`registry_verdict`;
    raises ``CompileError`` when it cannot be asked)."""
    from sluice.core.classify import classify
    from sluice.core.naming import PLAN_FILE
    from sluice.core.plan.model import Plan
    from sluice.kubectl import expect

    changes = live is not None and spec_differs(live.get("spec"), spec)
    seen = expect.view(live, plan_hash, spec_changes=changes)
    out: dict[str, Any] = {"object": f"sq/{name}", "namespace": session.namespace, "action": seen.action,
                           "fromHash": seen.basis_hash, "toHash": plan_hash}
    if seen.basis_hash is None or live is None:
        return {**out, "category": "initial", "decision": "create", "reasons": [], "changes": [],
                "note": seen.note}
    cluster_name = ((spec.get("clusterRef") or {}).get("name")) or "default"
    cluster = session.cluster(cluster_name)
    policy, source = expect.policy_of(spec, (cluster or {}).get("spec") if cluster else None)
    cm = session.config_map(seen.basis_config_map or "")
    if cm is None or PLAN_FILE not in (cm.get("data") or {}):
        # what the operator does without the running plan: it refuses to guess
        result: dict[str, Any] = {"category": "unsupported", "decision": "reject", "changes": [], "reasons": [
            f"the running plan's ConfigMap {seen.basis_config_map} is missing"]}
    else:
        try:
            old = Plan.from_json(cm["data"][PLAN_FILE])
        except ValueError as exc:
            raise PluginError(f"ConfigMap {seen.basis_config_map}: {PLAN_FILE} does not load: "
                              f"{str(exc).splitlines()[0]}") from exc
        decision = classify(old, plan, policy, old_spec=live.get("spec") or {}, new_spec=spec)
        if ask_registry:
            decision = registry_verdict(decision, live, spec, plan, old, policy)
        result = decision.to_json_dict()
    notes = [n for n in (seen.note, expect.consequence(result, policy, source, seen)) if n]
    return {**out, **result, "policy": source, "note": "; ".join(notes)}


def registry_verdict(decision: Any, live: Mapping[str, Any], spec: Mapping[str, Any], plan: Any,
                     running: Any, policy: Any) -> Any:
    """``decision`` (an ``UpgradeDecision``), ``reject`` when the registry refuses the sink's changed avro
    schema, asked as the webhook asks it: for the next plan version of ``live``."""
    from sluice.commands.registry import sink_refusal
    from sluice.core.admission import basis
    from sluice.core.formats.registry import refused_upgrade, upgrade_sink_questions
    from sluice.crd.streamingquery import StreamingQuerySpec

    base = basis(live)
    query = StreamingQuerySpec.model_validate(dict(spec)).query()
    refused = sink_refusal(upgrade_sink_questions(query, plan, running, policy,
                                                  base.version + 1 if base is not None else None))
    return refused_upgrade(decision, refused) if refused is not None else decision


def render(result: Mapping[str, Any], new_label: str) -> str:
    """``sluice diff``'s text, from the live query to ``new_label``, and what the operator does."""
    from sluice.commands.diff import render_text
    from sluice.kubectl.expect import short

    new = f"{new_label} (plan {short(result['toHash'])})"
    if result.get("fromHash") is None:
        lines = [f"{result['object']} -> {new}", f"decision: {result['decision']}"]
    else:
        old = f"{result['object']} (plan {short(result['fromHash'])})"
        lines = [render_text(dict(result), old, new)]
    if result.get("note"):
        lines.append(f"operator: {result['note']}")
    return "\n".join(lines)


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def run(args: argparse.Namespace) -> int:
    from sluice.core.errors import SluiceError
    from sluice.kubectl.connection import connect

    path = args.filename
    try:
        manifest = load_manifest(_read(path))
    except OSError as exc:
        print(f"{path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except UnicodeDecodeError as exc:
        print(f"{path}: cannot read: it is not UTF-8 text (offset {exc.start})", file=sys.stderr)
        return 1
    except SluiceError as exc:
        for problem in exc.problems:
            print(problem.render(path), file=sys.stderr)
        return 1
    session = connect(args)
    if manifest.namespace and args.namespace and manifest.namespace != args.namespace:
        raise PluginError(f"{path}: the namespace of the manifest ({manifest.namespace}) does not match the "
                          f"namespace given with -n ({args.namespace})")
    if manifest.namespace:
        session.namespace = manifest.namespace
    live = session.query_or_none(manifest.name)
    try:
        manifest = as_the_operator_plans(session, manifest, live)
        result = expected(session, manifest.name, live, manifest.spec, manifest.plan, manifest.hash,
                          ask_registry=True)
    except SluiceError as exc:
        for problem in exc.problems:
            print(problem.render(path), file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(render(result, path))
    return 0
