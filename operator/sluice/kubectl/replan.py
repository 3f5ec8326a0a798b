"""``kubectl sluice replan sq/NAME [--dry-run]``: accept the re-plan this operator offers.

An operator never re-plans a running query on its own: when its compiler plans the unchanged spec
differently, it says so (``status.plan.replan``, ``kubectl sluice plan -o text``) and waits. This
command accepts exactly the plan on offer, by writing its hash into the query's
``sluice.dev/replan`` annotation (only if nobody changed the object since it was read); the
operator then carries it out like any upgrade: classified, behind the health gate, rolled back on
failure. Declaratively (Argo CD, Helm): put the same annotation into the manifest.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from sluice.core.pinning import REPLAN_ANNOTATION
from sluice.core.status import short_hash as short
from sluice.kubectl.connection import PluginError, flags_parent


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replan", parents=[flags_parent()], help="accept the re-plan the operator offers for a query",
        description="Accept the plan this operator's compiler makes of the unchanged spec "
        "(status.plan.replan): annotate the query with its hash; the operator rolls it out.",
    )
    parser.add_argument("query", metavar="sq/NAME", help="the StreamingQuery")
    parser.add_argument("--dry-run", action="store_true", help="print the merge patch only; change nothing")


def run(args: argparse.Namespace) -> int:
    from sluice.kubectl.connection import connect, query_name

    name = query_name(args.query)
    session = connect(args)
    obj = session.query(name)
    replan = ((obj.get("status") or {}).get("plan") or {}).get("replan") or {}
    if not replan:
        print(f"sq/{name}: no re-plan on offer (this operator compiles the spec into the pinned plan)")
        return 0
    if not replan.get("hash"):
        raise PluginError(f"sq/{name}: nothing to accept: {replan.get('message')}")
    if replan.get("decision") == "reject":
        raise PluginError(f"sq/{name}: the re-plan to {short(replan['hash'])} would be refused: "
                          + " ".join(replan.get("reasons") or []))
    patch = {"metadata": {"annotations": {REPLAN_ANNOTATION: replan["hash"]}}}
    if args.dry_run:
        print(json.dumps(patch, indent=2))
        return 0
    session.patch_query(name, {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"],
                                            **patch["metadata"]}})
    print(f"sq/{name}: re-plan to plan {short(replan['hash'])} accepted ({replan.get('category')}, "
          f"{replan.get('decision')}); the operator rolls it out behind the health gate "
          f"(kubectl sluice history sq/{name})")
    return 0
