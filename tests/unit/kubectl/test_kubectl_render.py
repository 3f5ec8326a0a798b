"""The kubectl plugin's pure parts: arguments, what the operator will do, history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.core.records import UpgradeRecord
from sluice.kubectl import expect, history
from sluice.kubectl.cli import build_parser
from sluice.kubectl.connection import PluginError, connect, query_name

from tests.support import records
from tests.support.operator_fixtures import SQL, query_spec

SQL_WHERE = SQL.replace("FROM orders", "FROM orders WHERE amount > 10")
A, B, C = "a" * 64, "b" * 64, "c" * 64
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def record(from_hash: str, to_hash: str, outcome: str = "Succeeded", **extra: Any) -> dict[str, Any]:
    return {"fromHash": from_hash, "toHash": to_hash, "category": "data-selection", "decision": "in-place",
            "outcome": outcome, "time": T1, "reasons": ["Step filter-1 (filterV1) was added"], "changes": [],
            **extra}


def live(status: dict[str, Any], generation: int = 2) -> dict[str, Any]:
    return {"metadata": {"name": "totals", "namespace": "shop", "generation": generation},
            "spec": query_spec(), "status": status}


# -- arguments --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["sq/totals", "streamingquery/totals", "StreamingQueries.sluice.dev/totals",
                                 "totals"])
def test_query_references_like_kubectl(ref: str) -> None:
    assert query_name(ref) == "totals"


@pytest.mark.parametrize("ref", ["deploy/totals", "sq/", "sq/a/b"])
def test_other_references_are_refused_naming_them(ref: str) -> None:
    with pytest.raises(PluginError, match="sq/NAME"):
        query_name(ref)


def test_connection_flags_go_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    before = parser.parse_args(["-n", "a", "--context", "c", "history", "sq/x"])
    assert (before.namespace, before.context, before.kubeconfig) == ("a", "c", None)
    after = parser.parse_args(["history", "sq/x", "-n", "b", "--kubeconfig", "/k"])
    assert (after.namespace, after.context, after.kubeconfig) == ("b", None, "/k")
    both = parser.parse_args(["-n", "a", "plan", "sq/x", "-n", "b"])
    assert both.namespace == "b" and both.output == "json"
    assert parser.parse_args(["diff", "-f", "x.yaml"]).output == "text"


def kubeconfig(tmp_path: Path, namespace: str | None) -> Path:
    ctx: dict[str, Any] = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "one",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "one", "context": ctx},
                     {"name": "two", "context": {**ctx, "namespace": "other"}}],
    }))
    return path


def test_the_namespace_comes_from_the_flag_else_the_context_else_default(tmp_path: Path) -> None:
    parser = build_parser()
    path = str(kubeconfig(tmp_path, "team"))
    def namespace(*argv: str) -> str:
        return connect(parser.parse_args(["--kubeconfig", path, *argv])).namespace

    assert namespace("history", "x") == "team"
    assert namespace("--context", "two", "history", "x") == "other"
    assert namespace("history", "x", "-n", "mine") == "mine"
    bare = str(kubeconfig(tmp_path, None))
    session = connect(parser.parse_args(["--kubeconfig", bare, "history", "x"]))
    assert session.namespace == "default" and session.server == "https://127.0.0.1:1"
    with pytest.raises(PluginError, match="missing"):
        connect(parser.parse_args(["--kubeconfig", str(tmp_path / "missing"), "history", "x"]))


def test_without_the_kubernetes_client_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(PluginError, match=r"pip install 'sluice\[operator\]'"):
        connect(build_parser().parse_args(["history", "x"]))


# -- what the operator will do ----------------------------------------------------------------------


def test_an_object_that_does_not_exist_would_be_created() -> None:
    seen = expect.view(None, B, spec_changes=True)
    assert seen.action == "new" and seen.basis_hash is None and "would be created" in seen.note


def test_an_edit_is_classified_against_the_plan_the_workload_runs() -> None:
    pinned = records.pinned(A, configMap="totals-plan-aaaaaaaaaaaa")
    seen = expect.view(live(records.stored(plan=pinned)), B, spec_changes=True)
    assert (seen.action, seen.basis_hash, seen.basis_config_map) == ("classify", A, pinned.config_map)
    assert expect.view(live(records.stored(plan=pinned)), A, spec_changes=False).action == "steady"
    assert expect.view(live({}), B, spec_changes=True).action == "create"
    # rollback Never left the workload on the failed target: the edit is compared with that one
    failed = records.rollout("Failed", C, fromHash=A, targetConfigMap="totals-plan-cccccccccccc")
    seen = expect.view(live(records.stored(plan=pinned, rollout=failed)), B, spec_changes=True)
    assert (seen.basis_hash, seen.basis_config_map) == (C, "totals-plan-cccccccccccc")


def test_an_edit_during_an_upgrade_waits_for_it_and_a_revert_cancels_it() -> None:
    pinned = records.pinned(A, configMap="totals-plan-aaaaaaaaaaaa")
    verifying = records.rollout("Verifying", C, fromHash=A, targetConfigMap="totals-plan-cccccccccccc")
    seen = expect.view(live(records.stored(plan=pinned, rollout=verifying)), B, spec_changes=True)
    assert seen.action == "resume" and seen.basis_hash == C and "finishes it first" in seen.note
    seen = expect.view(live(records.stored(plan=pinned, rollout=verifying)), A, spec_changes=True)
    assert seen.action == "revert" and "rolled back (outcome Cancelled)" in seen.note
    waiting = records.rollout("AwaitingUpgrade", C, fromHash=A)
    assert expect.view(live(records.stored(plan=pinned, rollout=waiting)), A,
                       spec_changes=True).action == "cancel"
    # the spec asks again for a plan rolled back at this generation: not tried until an edit
    held = records.stored(plan=pinned, last_upgrade=UpgradeRecord.model_validate(
        record(A, B, "RolledBack", generation=2)))
    assert expect.view(live(held), B, spec_changes=False).action == "held"
    assert expect.view(live(held), B, spec_changes=True).action == "classify"


def test_the_policy_is_the_spec_s_else_the_cluster_s() -> None:
    backfill = {"upgrade": {"replaceStrategy": "backfill"}}
    own, source = expect.policy_of({"upgrade": {"allowReplace": False}}, backfill)
    assert not own.allow_replace and source == "spec.upgrade"
    cluster, source = expect.policy_of({"clusterRef": {"name": "big"}}, backfill)
    assert cluster.replace_strategy == "backfill" and source == "QueryCluster 'big'"
    default, source = expect.policy_of({}, None)
    assert default.allow_replace and "not found" in source


# -- history ----------------------------------------------------------------------------------------


def test_history_is_a_table_newest_first_under_the_running_plan() -> None:
    status = {"phase": "Running", "plan": {"hash": B, "version": 1, "configMap": "totals-plan-bbbbbbbbbbbb"},
              "history": [record(A, B, gapSeconds=0.8),
                          record(C, A, "RolledBack", time=T0,
                                 error={"class": "CAST_INVALID_INPUT", "message": "bad\nrow"})]}
    lines = history.render("totals", "shop", status).splitlines()
    assert lines[0] == ("sq/totals in shop: plan bbbbbbbbbbbb (version 1, ConfigMap "
                        "totals-plan-bbbbbbbbbbbb), phase Running")
    assert lines[1] == ""
    header = ["TIME", "FROM", "→", "TO", "CATEGORY", "DECISION", "OUTCOME", "GAP", "MESSAGE"]
    assert lines[2].split() == header
    assert lines[3].split()[:8] == [T1, "aaaaaaaaaaaa", "→", "bbbbbbbbbbbb", "data-selection", "in-place",
                                    "Succeeded", "0.80s"]
    assert lines[3].endswith("Step filter-1 (filterV1) was added")
    assert lines[4].split()[:8] == [T0, "cccccccccccc", "→", "aaaaaaaaaaaa", "data-selection", "in-place",
                                    "RolledBack", "-"]
    assert lines[4].endswith("CAST_INVALID_INPUT: bad row")  # one line per record
    # aligned: the category column starts at the same place on every line
    assert len({line.index("CATEGORY" if "CATEGORY" in line else "data-") for line in lines[2:]}) == 1


def test_history_cuts_messages_to_the_terminal_and_says_when_empty() -> None:
    status = {"plan": {"hash": B, "configMap": "m"}, "history": [record(A, B, message="x" * 300)]}
    lines = history.render("totals", "shop", status, width=120).splitlines()
    assert len(lines[3]) == 120 and lines[3].endswith("…")
    rollout = {"step": "Verifying", "fromHash": B, "targetHash": C, "category": "schema-evolution",
               "decision": "in-place", "message": "waiting for the driver"}
    text = history.render("totals", "shop", {"plan": {"hash": B}, "rollout": rollout})
    assert "in flight: Verifying bbbbbbbbbbbb → cccccccccccc (schema-evolution, in-place): waiting" in text
    assert text.endswith("no upgrades recorded yet")
    assert "no plan pinned yet" in history.render("totals", "shop", {})
