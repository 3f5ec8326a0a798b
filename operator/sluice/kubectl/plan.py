"""``kubectl sluice plan sq/NAME``: the plan the live query runs, from its pinned plan ConfigMap.

``-o json`` (the default, as ``sluice plan``) prints the ConfigMap's ``plan.json`` as it is;
``-o text`` the tree ``sluice plan -o text`` prints, after a line naming the query, its plan
version and ConfigMap, and the upgrade in flight if there is one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from sluice.kubectl.connection import PluginError, flags_parent


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan", parents=[flags_parent()], help="print the plan a live StreamingQuery runs",
        description="Print the pinned plan of a StreamingQuery (status.plan.configMap -> plan.json).",
    )
    parser.add_argument("query", metavar="sq/NAME", help="the StreamingQuery")
    parser.add_argument("-o", "--output", choices=["json", "text"], default="json", help="output format")


def pinned_config_map(name: str, status: Mapping[str, Any]) -> str:
    """The ConfigMap of the pinned plan; PluginError when none is pinned yet."""
    cm = (status.get("plan") or {}).get("configMap")
    if not cm:
        phase = status.get("phase") or "no status yet"
        raise PluginError(f"sq/{name} has no pinned plan yet ({phase}): the operator has not deployed it")
    return str(cm)


def header(name: str, namespace: str, status: Mapping[str, Any]) -> str:
    """``sq/NAME in NS: plan version N, ConfigMap X`` and the upgrade in flight, if any."""
    from sluice.kubectl.expect import short

    pinned = status.get("plan") or {}
    lines = [f"sq/{name} in {namespace}: plan version {pinned.get('version') or 1}, ConfigMap "
             f"{pinned.get('configMap')}"]
    rollout = status.get("rollout") or {}
    if rollout and rollout.get("targetHash") != pinned.get("hash"):
        lines.append(f"upgrade in flight: {rollout.get('step')} to plan {short(rollout.get('targetHash'))} "
                     f"({rollout.get('decision')}): {rollout.get('message') or ''}".rstrip(": "))
    engine = status.get("engine") or {}
    if engine:
        lines.append(f"engine {short(engine.get('digest'))}: {engine.get('image')}, Spark "
                     f"{engine.get('sparkVersion')}"
                     + (f" ({engine['waiting']})" if engine.get("waiting") else ""))
    lines += replan_lines(name, pinned)
    return "\n".join(lines)


def replan_lines(name: str, pinned: Mapping[str, Any]) -> list[str]:
    """The re-plan on offer, if this operator's compiler plans the unchanged spec differently."""
    from sluice.kubectl.expect import short

    replan = pinned.get("replan") or {}
    if not replan:
        return []
    if not replan.get("hash"):
        return [f"re-plan: {replan.get('message')}"]
    out = [f"re-plan on offer: plan {short(replan.get('hash'))} ({replan.get('category')}, "
           f"{replan.get('decision')}), compiled by operator {replan.get('compiler')}; the running plan "
           f"stays until you accept it: kubectl sluice replan sq/{name}"]
    out += [f"  {reason}" for reason in replan.get("reasons") or []]
    return out


def run(args: argparse.Namespace) -> int:
    from sluice.core.naming import PLAN_FILE
    from sluice.core.plan.model import Plan
    from sluice.core.plan.render import render_text
    from sluice.kubectl.connection import connect, query_name

    name = query_name(args.query)
    session = connect(args)
    obj = session.query(name)
    status = obj.get("status") or {}
    cm_name = pinned_config_map(name, status)
    cm = session.config_map(cm_name)
    text = ((cm or {}).get("data") or {}).get(PLAN_FILE)
    if text is None:
        raise PluginError(f"the plan ConfigMap {cm_name} of sq/{name} is missing (or has no {PLAN_FILE})")
    if args.output == "json":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    try:
        plan = Plan.from_json(text)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise PluginError(f"ConfigMap {cm_name}: {PLAN_FILE} does not load: {first}") from exc
    sys.stdout.write(header(name, session.namespace, status) + "\n" + render_text(plan))
    return 0
