"""``sluice diff OLD.yaml NEW.yaml``: what upgrading a StreamingQuery from OLD to NEW needs.

Both files are StreamingQuery manifests. The upgrade policy (``spec.upgrade``) is the NEW
manifest's. Besides the compiled plans, the spec fields outside the plan that change how the query
runs (``spec.resources``, ``spec.restartNonce``, the sink topic's partitions and replication factor)
are compared: a change there alone is ``transparent`` / ``in-place``.

An avro sink whose schema (value, or key with ``keyFormat: avro``) changes is checked against its
subject by the schema registry at ``$SLUICE_SCHEMA_REGISTRY_URL``, as the admission webhook checks it
(``sluice.core.formats.registry.upgrade_sink_questions``): an incompatible schema makes the decision
``reject``, the registry's reason first. The value and key schemas of a replace with backfill onto a
versioned topic go under that topic's new subjects (``<sink>-v<N>-value``, ``<sink>-v<N>-key``, unless
the sink names them) and are not asked about here (the plan version is unknown).

Exit 0 for any valid pair (whatever the decision, including ``reject``); exit 1 with ``FILE: line L,
column C: message`` (or ``FILE: FIELD: message``) on stderr when either manifest does not load or
compile, or when the sink's changed avro schema cannot be checked (no registry URL, or no answer).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="classify the upgrade from one StreamingQuery manifest to another",
        description="Compile both StreamingQuery manifests and say whether the upgrade is a no-op, "
        "can keep state and offsets (in-place), needs a new checkpoint (replace), or is refused "
        "(reject), with the reasons.",
    )
    parser.add_argument("old", metavar="OLD.yaml", help="the running StreamingQuery manifest")
    parser.add_argument("new", metavar="NEW.yaml", help="the new StreamingQuery manifest")
    parser.add_argument("--output", "-o", choices=["text", "json"], default="text", help="output format")


def _load(path: str) -> Any:
    """Compile one manifest into (plan, manifest); raises SluiceError or OSError."""
    from sluice.commands.registry import compile_with_registry
    from sluice.core.manifest import parse_manifest

    text = Path(path).read_text(encoding="utf-8")
    manifest = parse_manifest(text)
    return compile_with_registry(manifest.spec), manifest


def render_text(result: dict[str, Any], old: str, new: str) -> str:
    lines = [f"{old} -> {new}", f"category: {result['category']}", f"decision: {result['decision']}"]
    if result["reasons"]:
        lines.append("reasons:")
        lines += [f"  - {r}" for r in result["reasons"]]
    if result["changes"]:
        lines.append("changes:")
        for c in result["changes"]:
            lines.append(
                f"  - [{c['category']}] {c['step']}.{c['field']}: "
                f"{json.dumps(c['old'])} -> {json.dumps(c['new'])}"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from sluice.commands.registry import sink_refusal
    from sluice.core.classify import classify
    from sluice.core.errors import SluiceError
    from sluice.core.formats.registry import refused_upgrade, upgrade_sink_questions

    loaded = []
    failed = False
    for path in (args.old, args.new):
        try:
            loaded.append(_load(path))
        except SluiceError as exc:
            failed = True
            for problem in exc.problems:
                print(problem.render(path), file=sys.stderr)
        except OSError as exc:
            failed = True
            print(f"{path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
    if failed:
        return 1
    (old_plan, old_manifest), (new_plan, new_manifest) = loaded
    decision = classify(
        old_plan,
        new_plan,
        new_manifest.upgrade,
        old_spec=old_manifest.raw.get("spec") or {},
        new_spec=new_manifest.raw.get("spec") or {},
    )
    questions = upgrade_sink_questions(new_manifest.spec, new_plan, old_plan, new_manifest.upgrade)
    try:
        refused = sink_refusal(questions)
    except SluiceError as exc:
        for problem in exc.problems:
            print(problem.render(args.new), file=sys.stderr)
        return 1
    if refused is not None:
        decision = refused_upgrade(decision, refused)
    result = decision.to_json_dict()
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(render_text(result, args.old, args.new))
    return 0
