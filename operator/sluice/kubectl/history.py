"""``kubectl sluice history sq/NAME``: the upgrades of a live StreamingQuery, newest first.

A table of ``status.history`` (the last 10 upgrades that finished): time, plan hashes (12
characters), category, decision, outcome, output gap and message; above it the plan that runs, and
the upgrade in flight or waiting, if any. ``-o json`` prints ``status.history`` as it is.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from sluice.kubectl.connection import flags_parent

COLUMNS = ("TIME", "FROM → TO", "CATEGORY", "DECISION", "OUTCOME", "GAP", "MESSAGE")
#: the message column never gets narrower than this when the table is cut to the terminal
MIN_MESSAGE = 20


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "history", parents=[flags_parent()], help="list the upgrades of a live StreamingQuery",
        description="Print status.history of a StreamingQuery (newest first) and the plan that runs.",
    )
    parser.add_argument("query", metavar="sq/NAME", help="the StreamingQuery")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")


def _message(record: Mapping[str, Any]) -> str:
    error = record.get("error") or {}
    if error:
        text = f"{error.get('class')}: {error.get('message') or ''}".rstrip(": ")
    else:
        reasons = record.get("reasons") or []
        text = str(record.get("message") or (reasons[0] if reasons else ""))
    moved = record.get("fromEngine") and record.get("toEngine") and record["fromEngine"] != record["toEngine"]
    if moved:  # an engine upgrade (a QueryCluster change), on its own or with a plan change
        text = f"engine {str(record['fromEngine'])[:12]} → {str(record['toEngine'])[:12]}: {text}"
    elif record.get("cause") == "replan":
        text = f"re-plan accepted: {text}"
    return " ".join(text.split())  # one line


def _gap(value: Any) -> str:
    return f"{float(value):.2f}s" if isinstance(value, (int, float)) else "-"


def rows(history: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """One row per record, in the order of ``status.history`` (newest first)."""
    from sluice.kubectl.expect import short

    return [(str(r.get("time") or r.get("startedAt") or "-"),
             f"{short(r.get('fromHash'))} → {short(r.get('toHash'))}",
             str(r.get("category") or "-"), str(r.get("decision") or "-"), str(r.get("outcome") or "-"),
             _gap(r.get("gapSeconds")), _message(r) or "-") for r in history]


def table(body: Sequence[tuple[str, ...]], width: int | None = None) -> list[str]:
    """The rows under ``COLUMNS``, aligned; the message column cut so each line fits ``width``."""
    all_rows = [COLUMNS, *body]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(COLUMNS) - 1)]
    lead = sum(widths) + 2 * len(widths)
    room = None if width is None else max(MIN_MESSAGE, width - lead)
    out = []
    for row in all_rows:
        message = row[-1]
        if room is not None and len(message) > room:
            message = message[: room - 1] + "…"
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + message)
    return out


def render(name: str, namespace: str, status: Mapping[str, Any], width: int | None = None) -> str:
    """The plan line, the upgrade in flight (if any) and the history table."""
    from sluice.kubectl.expect import short

    pinned = status.get("plan") or {}
    if pinned.get("hash"):
        lines = [f"sq/{name} in {namespace}: plan {short(pinned['hash'])} (version "
                 f"{pinned.get('version') or 1}, ConfigMap {pinned.get('configMap')}), phase "
                 f"{status.get('phase') or '-'}"]
    else:
        lines = [f"sq/{name} in {namespace}: no plan pinned yet, phase {status.get('phase') or '-'}"]
    rollout = status.get("rollout") or {}
    last = status.get("lastUpgrade") or {}
    if rollout and rollout.get("step") != "Deploying":
        lines.append(f"in flight: {rollout.get('step')} {short(rollout.get('fromHash'))} → "
                     f"{short(rollout.get('targetHash'))} ({rollout.get('category')}, "
                     f"{rollout.get('decision')})"
                     + (f": {rollout['message']}" if rollout.get("message") else ""))
    elif last and last.get("outcome") in ("Pending", "InProgress"):
        lines.append(f"waiting: {short(last.get('fromHash'))} → {short(last.get('toHash'))} "
                     f"({last.get('category')}, {last.get('decision')}, {last.get('outcome')})")
    history = status.get("history") or []
    if not history:
        lines.append("no upgrades recorded yet")
        return "\n".join(lines)
    lines.append("")
    lines += table(rows(history), width)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from sluice.kubectl.connection import connect, query_name

    name = query_name(args.query)
    session = connect(args)
    status = session.query(name).get("status") or {}
    if args.output == "json":
        print(json.dumps(status.get("history") or [], indent=2))
        return 0
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(render(name, session.namespace, status, width))
    return 0
