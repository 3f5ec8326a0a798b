"""The kubectl plugin's subcommands end to end on an in-memory API (objects as the operator makes them)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.core.compiler import compile_query
from sluice.core.rollback import apply_merge_patch
from sluice.kubectl import cli, connection
from sluice.kubectl.connection import Session
from sluice.operator import builders

from tests.support.operator_fixtures import SQL, context, query_spec

Out = pytest.CaptureFixture[str]
SQL_WHERE = SQL.replace("FROM orders", "FROM orders WHERE amount > 10")
SQL_BY_ORDER = SQL.replace("customer", "order_id")
T1 = "2026-01-01T00:05:00Z"


class MemoryKube:
    """``sluice.operator.kube.Kube``'s verbs the plugin uses, on a dict of objects."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    def list(self, kind: str, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        wanted = dict(p.split("=", 1) for p in (label_selector or "").split(",") if p)
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace
                and all((o["metadata"].get("labels") or {}).get(a) == b for a, b in wanted.items())]

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((kind, name, patch))
        obj = self.objects[(kind, namespace, name)]
        obj["spec"] = apply_merge_patch(obj["spec"], patch.get("spec") or {})
        return copy.deepcopy(obj)


def plan_of(spec: dict[str, Any]) -> Any:
    return compile_query(context(spec=spec).spec.query())


def config_map(spec: dict[str, Any], *, keep_spec: bool = True) -> dict[str, Any]:
    plan = plan_of(spec)
    cm = builders.plan_config_map(context(spec=spec), plan.hash, plan.to_json())
    if not keep_spec:  # as an operator from before spec.json made it
        del cm["data"]["spec.json"]
    return cm


def world(*, keep_spec: bool = True, cluster_upgrade: dict[str, Any] | None = None) -> MemoryKube:
    """totals: created with SQL (plan A), upgraded in place to SQL_WHERE (plan B), which runs."""
    a, b = plan_of(query_spec()), plan_of(query_spec(sql=SQL_WHERE))
    sq = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
          "metadata": {"name": "totals", "namespace": "shop", "generation": 2, "resourceVersion": "41"},
          "spec": query_spec(sql=SQL_WHERE),
          "status": {"phase": "Running",
                     "plan": {"hash": b.hash, "shortHash": b.hash[:12], "version": 1,
                              "configMap": f"totals-plan-{b.hash[:12]}"},
                     "history": [{"fromHash": a.hash, "toHash": b.hash, "category": "data-selection",
                                  "decision": "in-place", "outcome": "Succeeded", "time": T1,
                                  "gapSeconds": 0.8, "reasons": ["Step filter-1 (filterV1) was added"],
                                  "changes": []}]}}
    qc = {"kind": "QueryCluster", "metadata": {"name": "default", "namespace": "shop"},
          "spec": {"serviceId": "shop", "kafka": {"bootstrapServers": "k:9092"},
                   **({"upgrade": cluster_upgrade} if cluster_upgrade else {})}}
    return MemoryKube(sq, qc, config_map(query_spec(), keep_spec=keep_spec),
                      config_map(query_spec(sql=SQL_WHERE)))


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(kube: MemoryKube) -> MemoryKube:
        def connect(args: Any) -> Session:
            return Session(kube=kube, namespace=getattr(args, "namespace", None) or "shop",  # type: ignore[arg-type]
                           server="memory")
        monkeypatch.setattr(connection, "connect", connect)
        return kube
    return install


def manifest(tmp_path: Path, spec: dict[str, Any], name: str = "totals", **meta: Any) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
                                    "metadata": {"name": name, **meta}, "spec": spec}, sort_keys=False))
    return str(path)


# -- plan ---------------------------------------------------------------------------------------------


def test_plan_prints_the_pinned_plan(use: Any, capsys: Out) -> None:
    kube = use(world())
    assert cli.main(["plan", "sq/totals"]) == 0
    out = capsys.readouterr().out
    pinned = kube.objects[("StreamingQuery", "shop", "totals")]["status"]["plan"]
    assert json.loads(out)["hash"] == pinned["hash"]
    assert cli.main(["plan", "sq/totals", "-o", "text"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"sq/totals in shop: plan version 1, ConfigMap {pinned['configMap']}\n"
                           "plan v1 for Spark")
    assert "filterV1 [filter-1]" in text and "where amount > 10" in text


def test_plan_of_a_query_without_a_plan_or_that_does_not_exist(use: Any, capsys: Out) -> None:
    kube = use(world())
    assert cli.main(["plan", "sq/nope"]) == 1
    assert capsys.readouterr().err == 'error: streamingquery "nope" not found in namespace "shop"\n'
    kube.objects[("StreamingQuery", "shop", "totals")]["status"] = {"phase": "Pending"}
    assert cli.main(["plan", "sq/totals"]) == 1
    assert "has no pinned plan yet (Pending)" in capsys.readouterr().err


# -- diff ---------------------------------------------------------------------------------------------


def test_diff_classifies_against_the_live_plan(use: Any, tmp_path: Path, capsys: Out) -> None:
    use(world())
    path = manifest(tmp_path, query_spec(sql=SQL_WHERE.replace("> 10", "> 20")))
    assert cli.main(["diff", "-f", path]) == 0
    out = capsys.readouterr().out.splitlines()
    b = plan_of(query_spec(sql=SQL_WHERE)).hash
    assert out[0].startswith(f"sq/totals (plan {b[:12]}) -> {path} (plan ")
    assert out[1:3] == ["category: data-selection", "decision: in-place"]
    assert out[-1].startswith("operator: in-place upgrade: a driver on the new plan warms up")
    assert cli.main(["diff", "-f", path, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["category"], data["decision"], data["action"], data["fromHash"]) == (
        "data-selection", "in-place", "classify", b)
    assert data["policy"] == "QueryCluster 'default'"


def test_diff_applies_the_cluster_s_policy(use: Any, tmp_path: Path, capsys: Out) -> None:
    use(world(cluster_upgrade={"allowReplace": False}))
    path = manifest(tmp_path, query_spec(sql=SQL_BY_ORDER, sink={"topic": "totals", "key": ["order_id"],
                                                                 "outputMode": "update"}))
    assert cli.main(["diff", "-f", path, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["category"], data["decision"]) == ("topology", "reject")
    assert "allowReplace is false" in data["reasons"][0] and "refused" in data["note"]
    # its own spec.upgrade wins
    path = manifest(tmp_path, query_spec(sql=SQL_BY_ORDER, sink={"topic": "totals", "key": ["order_id"],
                                                                 "outputMode": "update"},
                                         upgrade={"replaceStrategy": "backfill"}))
    assert cli.main(["diff", "-f", path, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decision"] == "replace" and "with backfill" in data["note"]


def test_diff_of_a_new_query_says_it_would_be_created(use: Any, tmp_path: Path, capsys: Out) -> None:
    use(world())
    path = manifest(tmp_path, query_spec(), name="fresh")
    assert cli.main(["diff", "-f", path]) == 0
    out = capsys.readouterr().out
    assert "decision: create" in out and "it does not exist yet: it would be created" in out


def test_diff_without_the_running_plan_config_map_is_a_reject(use: Any, tmp_path: Path, capsys: Out) -> None:
    kube = use(world())
    b = plan_of(query_spec(sql=SQL_WHERE)).hash
    del kube.objects[("ConfigMap", "shop", f"totals-plan-{b[:12]}")]
    assert cli.main(["diff", "-f", manifest(tmp_path, query_spec()), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["category"], data["decision"]) == ("unsupported", "reject")
    assert data["reasons"] == [f"the running plan's ConfigMap totals-plan-{b[:12]} is missing"]


def test_diff_of_a_manifest_that_does_not_compile_names_file_line_and_column(
        use: Any, tmp_path: Path, capsys: Out) -> None:
    use(world())
    path = manifest(tmp_path, query_spec(sql="SELECT customer,\n  nope FROM orders"))
    assert cli.main(["diff", "-f", path]) == 1
    assert capsys.readouterr().err.startswith(f"{path}: line 2, column 3: ")
    path = manifest(tmp_path, query_spec(deletionPolicy="Sometimes"))
    assert cli.main(["diff", "-f", path]) == 1
    assert capsys.readouterr().err.startswith(f"{path}: spec.deletionPolicy: ")
    assert cli.main(["diff", "-f", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err
    path = manifest(tmp_path, query_spec(), namespace="elsewhere")
    assert cli.main(["diff", "-f", path, "-n", "shop"]) == 1
    assert "does not match" in capsys.readouterr().err


def avro_world() -> MemoryKube:
    """totals, its sink writing avro (subject totals-value), running plan version 1."""
    spec = query_spec(sink={"topic": "totals", "format": "avro", "key": ["customer"], "outputMode": "update"})
    plan = plan_of(spec)
    sq = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
          "metadata": {"name": "totals", "namespace": "shop", "generation": 1, "resourceVersion": "7"},
          "spec": spec, "status": {"phase": "Running", "plan": {
              "hash": plan.hash, "version": 1, "configMap": f"totals-plan-{plan.hash[:12]}"}}}
    qc = {"kind": "QueryCluster", "metadata": {"name": "default", "namespace": "shop"},
          "spec": {"serviceId": "shop", "kafka": {"bootstrapServers": "k:9092"}}}
    return MemoryKube(sq, qc, config_map(spec))


def test_diff_of_a_changed_avro_sink_schema_without_the_registry_url_names_the_field(
        use: Any, tmp_path: Path, capsys: Out, monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.commands.registry import URL_ENV

    monkeypatch.delenv(URL_ENV, raising=False)
    use(avro_world())
    sink = {"topic": "totals", "format": "avro", "key": ["customer"], "outputMode": "update"}
    retyped_sql = SQL.replace("sum(amount) AS total", "cast(sum(amount) AS string) AS total")
    retyped = manifest(tmp_path, query_spec(sql=retyped_sql, sink=sink))
    assert cli.main(["diff", "-f", retyped]) == 1
    assert capsys.readouterr().err == (f"{retyped}: spec.sink.format: the sink's new Avro schema goes under "
                                       f"subject 'totals-value': set {URL_ENV} to the schema registry's base "
                                       "URL to check its compatibility here\n")
    # the same sink schema: nothing to ask, no registry needed
    filtered = manifest(tmp_path, query_spec(sql=SQL_WHERE, sink=sink))
    assert cli.main(["diff", "-f", filtered, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "in-place"


# -- history ------------------------------------------------------------------------------------------


def test_history_prints_the_table(use: Any, capsys: Out) -> None:
    use(world())
    assert cli.main(["history", "sq/totals"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sq/totals in shop: plan ") and "TIME" in out[2]
    assert "Succeeded" in out[3] and "0.80s" in out[3]
    assert cli.main(["history", "sq/totals", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["outcome"] == "Succeeded"


# -- rollback -----------------------------------------------------------------------------------------


def test_rollback_patches_the_query_back_and_says_what_to_expect(use: Any, capsys: Out) -> None:
    kube = use(world())
    a = plan_of(query_spec()).hash
    assert cli.main(["rollback", "sq/totals", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {"spec": {"sql": SQL}}
    assert kube.patches == []
    assert cli.main(["rollback", "sq/totals"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert kube.patches == [("StreamingQuery", "totals", {"metadata": {"resourceVersion": "41"},
                                                          "spec": {"sql": SQL}})]
    assert out[0].startswith(f"sq/totals: spec patched back to the query of plan {a[:12]} (ConfigMap "
                             f"totals-plan-{a[:12]}; the plan before the newest upgrade")
    assert "category: data-selection" in out and "decision: in-place" in out
    assert kube.objects[("StreamingQuery", "shop", "totals")]["spec"]["sql"] == SQL
    # once there, there is nothing more to do
    assert cli.main(["rollback", "sq/totals", "--to", a[:8]]) == 0
    assert "nothing to patch" in capsys.readouterr().out


def test_rollback_refuses_when_the_old_query_is_not_known(use: Any, capsys: Out) -> None:
    kube = use(world(keep_spec=False))
    a = plan_of(query_spec()).hash
    assert cli.main(["rollback", "sq/totals"]) == 1
    assert f"ConfigMap totals-plan-{a[:12]} has no spec.json" in capsys.readouterr().err
    del kube.objects[("ConfigMap", "shop", f"totals-plan-{a[:12]}")]
    assert cli.main(["rollback", "sq/totals"]) == 1
    assert f"the ConfigMap of plan {a[:12]} (totals-plan-{a[:12]}) is gone" in capsys.readouterr().err
    kube.objects[("StreamingQuery", "shop", "totals")]["status"]["history"] = []
    assert cli.main(["rollback", "sq/totals"]) == 1
    assert "no upgrade history" in capsys.readouterr().err
    assert kube.patches == []


def test_rollback_finds_a_config_map_named_otherwise_by_its_labels(use: Any, capsys: Out) -> None:
    kube = use(world())
    a = plan_of(query_spec()).hash
    cm = kube.objects.pop(("ConfigMap", "shop", f"totals-plan-{a[:12]}"))
    cm["metadata"]["name"] = "an-older-name"
    kube.objects[("ConfigMap", "shop", "an-older-name")] = cm
    assert cli.main(["rollback", "sq/totals", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {"spec": {"sql": SQL}}
