"""The CRDs in crds/ are generated from the pydantic models, structural, and useful to kubectl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.commands.crds import chart_files
from sluice.crd.generate import crd_for, generated_files, openapi_schema
from sluice.crd.querycluster import QueryCluster
from sluice.crd.streamingquery import StreamingQuery, StreamingQuerySpec

from tests.support import paths

REPO = paths.REPO


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, sub in node.get("properties", {}).items():
            out += walk(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("name", sorted(generated_files()))
def test_committed_crds_match_the_models(name: str) -> None:
    committed = REPO / "crds" / name
    assert committed.is_file(), f"crds/{name} missing: run `sluice crds --output-dir crds`"
    assert committed.read_text() == generated_files()[name], (
        f"crds/{name} drifted from the models: run `sluice crds --output-dir crds`"
    )


def test_chart_carries_exactly_the_generated_sluice_crds() -> None:
    chart = REPO / "charts" / "sluice" / "crds"
    assert sorted(p.name for p in chart.glob("*.yaml")) == sorted(chart_files())
    for name, text in chart_files().items():
        assert (chart / name).read_text() == text, (
            f"charts/sluice/crds/{name} drifted from the models: run `make crds`"
        )


@pytest.mark.parametrize("kind", [StreamingQuery, QueryCluster])
def test_schema_is_structural(kind: Any) -> None:
    root = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = yaml.safe_dump(root)
    for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "const:", "title:"):
        assert forbidden not in text, forbidden
    for path, node in walk(root):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "exclusiveMinimum" in node:
            assert isinstance(node["exclusiveMinimum"], bool), path
        if node.get("nullable"):
            assert "default" not in node or node["default"] is not None, path


@pytest.mark.parametrize("kind", [StreamingQuery, QueryCluster])
def test_every_spec_field_has_a_description(kind: Any) -> None:
    root = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = root["properties"]["spec"]
    missing = [p for p, node in walk(spec, "spec")
               if p.count(".") == 1 and not p.endswith(("[]", "{}")) and not node.get("description")]
    assert not missing, missing
    assert root["description"]


#: the nodes of a pod template that keep unknown fields (``sluice.crd.podtemplate``): its metadata and
#: spec (so that the webhook and the reconcile see a protected field, which the API server would
#: otherwise prune, and refuse it by name) and the Kubernetes terms kept as Kubernetes has them
POD_TEMPLATE_OPEN = {
    ".metadata", ".spec",
    ".spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    ".spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[]",
    *(f".spec.affinity.{kind}.{when}DuringSchedulingIgnoredDuringExecution[]"
      for kind in ("podAffinity", "podAntiAffinity") for when in ("required", "preferred")),
    ".spec.topologySpreadConstraints[].labelSelector",
}


#: the engine records of a query's status keep the cluster's pod templates as the operator wrote them
STATUS_OPEN = {".status.engine.podTemplate", ".status.rollout.targetEngine.podTemplate"}


def test_preserve_unknown_fields_only_where_a_pod_template_needs_them() -> None:
    for kind in (StreamingQuery, QueryCluster):
        root = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        open_nodes = [p for p, n in walk(root) if n.get("x-kubernetes-preserve-unknown-fields")]
        expected_status = STATUS_OPEN if kind is StreamingQuery else set()
        assert {p for p in open_nodes if p.startswith(".status")} == expected_status
        open_nodes = [p for p in open_nodes if not p.startswith(".status")]
        outside = [p for p in open_nodes if not p.startswith(".spec.podTemplate.")]
        assert outside == [], outside
        roles = {p.split(".podTemplate.")[1].split(".")[0] for p in open_nodes}
        assert roles == {"driver", "executor"}
        within = {p.split(".podTemplate.")[1].split(".", 1)[1] for p in open_nodes}
        assert {f".{p}" for p in within} == POD_TEMPLATE_OPEN
        spec = root["properties"]["spec"]["properties"]["podTemplate"]["properties"]["driver"]
        assert not spec.get("x-kubernetes-preserve-unknown-fields")  # apiVersion, kind, metadata, spec only


def test_names_subresources_and_printer_columns() -> None:
    sq = crd_for(StreamingQuery)["spec"]
    assert sq["names"]["shortNames"] == ["sq"]
    assert crd_for(QueryCluster)["spec"]["names"]["shortNames"] == ["qc"]
    version = sq["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase", "Plan": ".status.plan.shortHash", "Version": ".status.plan.version",
        "Upgrade": ".status.lastUpgrade.outcome", "Ready": ".status.ready", "Output": ".status.output.topic",
        "Replan": ".status.plan.replan.decision", "Active": ".status.drivers.active",
        "Age": ".metadata.creationTimestamp",
    }
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Replan", "Active"]  # the re-plan on offer and the driver pod's long name: -o wide


def test_server_side_validation_rules() -> None:
    spec = openapi_schema(StreamingQuerySpec)
    props = spec["properties"]
    assert props["deletionPolicy"]["enum"] == ["Retain", "Delete"]
    assert props["deletionPolicy"]["default"] == "Retain"
    assert props["sources"]["minItems"] == 1
    assert props["sql"]["minLength"] == 1
    assert props["shufflePartitions"]["minimum"] == 1
    assert props["clusterRef"]["nullable"] is True
    assert props["sink"]["properties"]["outputMode"]["enum"] == ["append", "update", "complete"]
    assert "sql" in spec["required"] and "sink" in spec["required"]
    qc = openapi_schema(QueryCluster.model_fields["spec"].annotation)  # type: ignore[arg-type]
    assert qc["properties"]["serviceId"]["pattern"].startswith("^[a-z0-9]")
    assert qc["properties"]["executors"]["minimum"] == 0
    assert qc["properties"]["sparkConf"]["additionalProperties"] == {"type": "string"}
    assert qc["properties"]["kafka"]["properties"]["sasl"]["properties"]["passwordSecret"]["required"] == [
        "name", "key"]


def test_conditions_are_a_map_list() -> None:
    root = crd_for(StreamingQuery)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status = root["properties"]["status"]
    cond = status["properties"]["conditions"]
    assert cond["x-kubernetes-list-type"] == "map"
    assert cond["x-kubernetes-list-map-keys"] == ["type"]


def test_crds_command_check_mode(tmp_path: Path) -> None:
    from sluice.cli import main

    assert main(["crds", "--output-dir", str(tmp_path)]) == 0
    assert main(["crds", "--output-dir", str(tmp_path), "--check"]) == 0
    (tmp_path / "streamingqueries.sluice.dev.yaml").write_text("stale")
    assert main(["crds", "--output-dir", str(tmp_path), "--check"]) == 1


def test_crds_command_writes_the_chart_copy(tmp_path: Path) -> None:
    from sluice.cli import main

    out, chart = tmp_path / "crds", tmp_path / "chart"
    assert main(["crds", "--output-dir", str(out), "--chart-dir", str(chart)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(generated_files())
    assert sorted(p.name for p in chart.iterdir()) == sorted(chart_files())
    assert "kopfpeerings.kopf.dev.yaml" not in chart_files()
    assert main(["crds", "--output-dir", str(out), "--chart-dir", str(chart), "--check"]) == 0
    (chart / "queryclusters.sluice.dev.yaml").write_text("stale")
    assert main(["crds", "--output-dir", str(out), "--chart-dir", str(chart), "--check"]) == 1
