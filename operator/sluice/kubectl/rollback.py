"""``kubectl sluice rollback sq/NAME [--to HASH] [--dry-run]``: put the query of an earlier plan back.

Which plan, and the spec patch that returns to it, are :mod:`sluice.core.rollback`'s (the operator
uses the same for the Argo CD ``rollback`` action's request). The plugin reads the plan's ConfigMap,
checks that the query it keeps still compiles, patches the spec (only if nobody changed the object
since it was read) and prints what the operator is expected to do with the edit, with
``kubectl sluice diff``'s logic.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from sluice.core.rollback import RollbackError
from sluice.core.status import short_hash as short
from sluice.kubectl.connection import PluginError, flags_parent


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


def run(args: argparse.Namespace) -> int:
    from sluice.kubectl import diff
    from sluice.kubectl.connection import connect, query_name
    from sluice.operator.rollback_request import prepare

    name = query_name(args.query)
    session = connect(args)
    obj = session.query(name)
    try:
        done = prepare(session.kube, obj, args.to)
    except RollbackError as exc:
        raise PluginError(str(exc)) from exc
    if not done.patch:
        print(f"sq/{name}: the spec already holds the query of plan {short(done.target)} ({done.why}): "
              f"nothing to patch")
        return 0
    if args.dry_run:
        print(json.dumps({"spec": done.patch}, indent=2))
        return 0
    assert done.plan is not None and done.new_hash is not None
    # what the operator will do, seen before the edit
    expected = diff.expected(session, name, obj, done.new_spec, done.plan, done.new_hash)
    session.patch_query(name, {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                               "spec": done.patch})
    print(f"sq/{name}: spec patched back to the query of plan {short(done.target)} (ConfigMap "
          f"{done.config_map}; {done.why}); fields: {', '.join(sorted(done.patch))}")
    if not done.new_hash.startswith(done.target):
        print(f"note: with this version of sluice that query compiles to plan {short(done.new_hash)}")
    print("the operator classifies and carries out the edit like any other; expected:")
    print(diff.render(expected, done.config_map))
    return 0
