"""``kubectl sluice`` through the real kubectl, on the real API server, with ``sluice operator``
running as a process of its own and a real Kafka broker.

No kubelet runs, so driver pods stay Pending: the drivers' side of the upgrade protocol (the
holder's Lease records a driver of a plan writes when it takes over and commits batches) is
written by the test with ``tests.support.drivers.DriverSide``, as the operator's integration tests
do. Everything else is the operator's own doing: it pins the plans (and keeps each plan's query
spec in its ConfigMap), classifies the edits, switches the driver Deployment, runs the health
gate on the Lease records, records the upgrades in ``status.history``, and answers the Argo CD
rollback action's request (the action run in Lua 5.1 on the live object, patched in as Argo CD
patches an action's result).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.core.rollback import ROLLBACK_DONE, ROLLBACK_REQUEST, ROLLBACK_RESULT
from sluice.core.status import merge_patch
from sluice.operator.kube import Kube
from sluice_dev.platform.lua import ensure_lua

from tests.support.argocd import QUERY_ACTIONS, clean_returned, run_script
from tests.support.drivers import DriverSide
from tests.support.operator_process import OperatorProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SQL = "SELECT order_id, customer, amount FROM orders"
SQL_WHERE = "SELECT order_id, customer, amount FROM orders\nWHERE amount > 10"
VENV_BIN = Path(sys.executable).parent


def manifest(ns: str, topic: str, sql: str, name: str = "totals") -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"sources": [{"name": "orders", "topic": f"{topic}-in", "schema": [
                {"name": "order_id", "type": "string"}, {"name": "customer", "type": "string"},
                {"name": "amount", "type": "double"}]}],
                "sql": sql, "sink": {"topic": topic}, "trigger": {"processingTime": "5 seconds"}}}


@pytest.fixture
def operator(kube: Any, namespace: str, crds: None, tmp_path: Path) -> Iterator[OperatorProcess]:
    op = OperatorProcess(kube, namespace, tmp_path / "operator.log")
    try:
        yield op
    finally:
        op.stop()


def run(kube: Any, *argv: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``kubectl ARGV`` with the venv's bin (so ``kubectl-sluice``) on PATH."""
    env = kube.env()
    env["PATH"] = f"{kube.bin_dir}:{VENV_BIN}:{env.get('PATH', '')}"
    done = subprocess.run([str(kube.bin_dir / "kubectl"), *argv], env=env, capture_output=True, text=True,
                          timeout=60)
    if ok:
        assert done.returncode == 0, f"kubectl {' '.join(argv)}: exit {done.returncode}\n{done.stderr}"
    return done


def status(k: Kube, ns: str) -> dict[str, Any]:
    return status_of(k, ns, "totals")


def status_of(k: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict((k.get("StreamingQuery", ns, name) or {}).get("status") or {})


def answered(k: Kube, ns: str, name: str, request: str) -> dict[str, Any] | None:
    """The query once the operator answered rollback request ``request``."""
    obj = k.get("StreamingQuery", ns, name) or {}
    return obj if (obj.get("metadata", {}).get("annotations") or {}).get(ROLLBACK_DONE) == request else None


def settled(k: Kube, ns: str, generation: int, step: str | None = None) -> Any:
    """The status once the operator reconciled ``generation`` and the rollout is at ``step``
    (None: no rollout in flight)."""
    def check() -> dict[str, Any] | None:
        st = status(k, ns)
        at = (st.get("rollout") or {}).get("step")
        return st if st.get("observedGeneration") == generation and st.get("plan") and at == step else None
    return check


def test_plan_diff_history_and_rollback_through_kubectl(kube: Any, namespace: str, kafka: str, tmp_path: Path,
                                                        operator: OperatorProcess) -> None:
    assert (VENV_BIN / "kubectl-sluice").is_file(), "kubectl-sluice is not installed: run `make install`"
    ns, k, topic = namespace, Kube(kube.api), f"kp-{uuid.uuid4().hex[:6]}"
    k.create({"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
              "metadata": {"name": "default", "namespace": ns},
              "spec": {"serviceId": "kp", "kafka": {"bootstrapServers": kafka}, "drainSeconds": 10}})
    k.create(manifest(ns, topic, SQL))
    try:
        st = eventually(settled(k, ns, 1), timeout=60, what="the query's first plan pinned")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{operator.tail()}") from None
    first = st["plan"]["hash"]
    assert st["plan"]["shortHash"] == first[:12]
    cm = k.get("ConfigMap", ns, st["plan"]["configMap"])
    assert cm is not None and json.loads(cm["data"]["spec.json"])["sql"] == SQL  # the operator keeps it

    # the printer columns: the short hash, the plan version; the driver pod only with -o wide
    table = run(kube, "get", "sq", "-n", ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "PLAN", "VERSION", "UPGRADE", "READY", "OUTPUT", "AGE"]
    assert table[1].split()[:4] == ["totals", "Starting", first[:12], "1"] and first not in table[1]
    assert "ACTIVE" in run(kube, "get", "sq", "-n", ns, "-o", "wide").stdout.splitlines()[0].split()

    # plan: the pinned plan.json as it is, or the tree
    assert json.loads(run(kube, "sluice", "plan", "sq/totals", "-n", ns).stdout)["hash"] == first
    text = run(kube, "sluice", "plan", "sq/totals", "-n", ns, "-o", "text").stdout
    assert text.startswith(f"sq/totals in {ns}: plan version 1, ConfigMap totals-plan-{first[:12]}\n")
    assert "plan v1 for Spark" in text and f"topic {topic}-in (json)" in text

    # diff: an added WHERE against the live plan, as the operator will classify it
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(manifest(ns, topic, SQL_WHERE), sort_keys=False))
    out = run(kube, "sluice", "diff", "-f", str(edited)).stdout.splitlines()
    assert out[0].startswith(f"sq/totals (plan {first[:12]}) -> {edited} (plan ")
    assert out[1:3] == ["category: data-selection", "decision: in-place"]
    assert out[-1].startswith("operator: in-place upgrade")
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(manifest(ns, topic, "SELECT order_id,\n  nope FROM orders")))
    done = run(kube, "sluice", "diff", "-f", str(broken), ok=False)
    assert done.returncode == 1 and done.stderr.startswith(f"{broken}: line 2, column 3: "), done.stderr
    fresh = tmp_path / "fresh.yaml"
    fresh.write_text(yaml.safe_dump(manifest(ns, topic, SQL, name="fresh")))
    assert "it would be created" in run(kube, "sluice", "diff", "-f", str(fresh)).stdout

    # the edit, applied with kubectl and carried out by the operator (the drivers' records by the test)
    drivers = DriverSide(kube.api, ns)
    eventually(lambda: k.get("Lease", ns, "totals-driver"), what="the driver Lease")
    drivers.take_over(first, batches=5)
    run(kube, "apply", "-f", str(edited))
    st = eventually(settled(k, ns, 2, "Verifying"), timeout=60, what="the WHERE edit verifying")
    second = st["rollout"]["targetHash"]
    drivers.take_over(second, batches=3)
    st = eventually(settled(k, ns, 2), timeout=60, what="the WHERE edit succeeded")
    assert st["plan"]["hash"] == second and st["lastUpgrade"]["outcome"] == "Succeeded"

    # history: the edit, newest first, under the running plan
    out = run(kube, "sluice", "history", "sq/totals", "-n", ns).stdout.splitlines()
    assert out[0] == (f"sq/totals in {ns}: plan {second[:12]} (version 1, ConfigMap "
                      f"totals-plan-{second[:12]}), phase Starting")
    assert out[2].split()[:4] == ["TIME", "FROM", "→", "TO"]
    assert out[3].split()[1:8] == [first[:12], "→", second[:12], "data-selection", "in-place", "Succeeded",
                                   "0.80s"]
    assert len(out) == 4
    assert run(kube, "get", "sq", "-n", ns).stdout.splitlines()[1].split()[:5] == [
        "totals", "Starting", second[:12], "1", "Succeeded"]

    # rollback: the dry run only prints the patch; the real one patches the spec back to the first SQL
    assert json.loads(run(kube, "sluice", "rollback", "sq/totals", "-n", ns, "--dry-run").stdout) == {
        "spec": {"sql": SQL}}
    assert k.get("StreamingQuery", ns, "totals")["metadata"]["generation"] == 2
    out = run(kube, "sluice", "rollback", "sq/totals", "-n", ns).stdout.splitlines()
    assert out[0].startswith(f"sq/totals: spec patched back to the query of plan {first[:12]} "
                             f"(ConfigMap totals-plan-{first[:12]}; the plan before the newest upgrade")
    assert "category: data-selection" in out and "decision: in-place" in out
    obj = k.get("StreamingQuery", ns, "totals")
    assert obj["spec"]["sql"] == SQL and obj["metadata"]["generation"] == 3
    assert obj["spec"]["trigger"] == {"processingTime": "5 seconds"}  # the rest of the spec as it was

    # the operator carries the rollback out like any other edit
    st = eventually(settled(k, ns, 3, "Verifying"), timeout=60, what="the rollback's edit verifying")
    assert st["rollout"]["targetHash"] == first and st["lastUpgrade"]["category"] == "data-selection"
    drivers.take_over(first, batches=3)
    st = eventually(settled(k, ns, 3), timeout=60, what="the rollback's edit succeeded")
    assert st["plan"]["hash"] == first and [r["toHash"] for r in st["history"]] == [first, second]
    out = run(kube, "sluice", "history", "sq/totals", "-n", ns).stdout.splitlines()
    assert len(out) == 5 and out[3].split()[1:4] == [second[:12], "→", first[:12]]

    # the Argo CD rollback action on the live object, patched in as Argo CD does (a merge patch of
    # the action's result against the live object): the operator answers the request
    lua = ensure_lua()
    live = k.get("StreamingQuery", ns, "totals")
    offered = run_script(lua, QUERY_ACTIONS / "discovery.lua", live, tmp_path)
    assert offered["rollback"]["disabled"] is False
    asked = clean_returned(run_script(lua, QUERY_ACTIONS / "rollback" / "action.lua", live, tmp_path), live)
    patch = merge_patch(live, asked)
    request = patch["metadata"]["annotations"][ROLLBACK_REQUEST]
    assert patch == {"metadata": {"annotations": {ROLLBACK_REQUEST: request}}}  # the spec: the operator's
    k.patch("StreamingQuery", ns, "totals", patch)
    obj = eventually(lambda: answered(k, ns, "totals", request), timeout=60, what="the request answered")
    notes = obj["metadata"]["annotations"]
    assert notes[ROLLBACK_RESULT].startswith(
        f"spec patched back to the query of plan {second[:12]} (ConfigMap totals-plan-{second[:12]}; the "
        f"plan before the newest upgrade")
    assert obj["spec"]["sql"] == SQL_WHERE and obj["metadata"]["generation"] == 4
    assert obj["spec"]["trigger"] == {"processingTime": "5 seconds"}
    assert any(request in e["message"] for e in k.list("Event", ns) if e.get("reason") == "RollbackRequested")
    st = eventually(settled(k, ns, 4, "Verifying"), timeout=60, what="the action's edit verifying")
    assert st["rollout"]["targetHash"] == second
    drivers.take_over(second, batches=3)
    st = eventually(settled(k, ns, 4), timeout=60, what="the action's edit succeeded")
    assert st["plan"]["hash"] == second and [r["toHash"] for r in st["history"]] == [second, first, second]
    # answered once: the next reconcile leaves it alone, and Argo CD offers the action again
    assert k.get("StreamingQuery", ns, "totals")["metadata"]["generation"] == 4
    assert run_script(lua, QUERY_ACTIONS / "discovery.lua", k.get("StreamingQuery", ns, "totals"),
                      tmp_path)["rollback"]["disabled"] is False

    # a rollback the API server refuses (here a ValidatingAdmissionPolicy, as the admission webhook
    # would refuse a replace that allowReplace: false forbids) changes no spec, and says why, once
    policy = f"sluice-freeze-{ns}"
    guard = tmp_path / "guard.yaml"
    guard.write_text(yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": policy},
         "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [{
             "apiGroups": ["sluice.dev"], "apiVersions": ["*"], "operations": ["UPDATE"],
             "resources": ["streamingqueries"]}]},
             "validations": [{"expression": "object.spec.sql == oldObject.spec.sql",
                              "message": "the SQL of this query is frozen"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": policy},
         "spec": {"policyName": policy, "validationActions": ["Deny"], "matchResources": {
             "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}}]))
    run(kube, "apply", "-f", str(guard))
    try:
        back = json.dumps({"spec": {"sql": SQL}})
        eventually(lambda: "frozen" in run(kube, "patch", "sq", "totals", "-n", ns, "--type=merge",
                                           "--dry-run=server", "-p", back, ok=False).stderr,
                   timeout=30, what="the policy in force")
        k.patch("StreamingQuery", ns, "totals", {"metadata": {"annotations": {ROLLBACK_REQUEST: "frozen"}}})
        obj = eventually(lambda: answered(k, ns, "totals", "frozen"), timeout=60, what="the request answered")
    finally:
        run(kube, "delete", "-f", str(guard), "--ignore-not-found")
    result = obj["metadata"]["annotations"][ROLLBACK_RESULT]
    assert result.startswith(f"refused: the API server refused the spec patch back to plan {first[:12]}: "), (
        result)
    assert "the SQL of this query is frozen" in result
    assert obj["metadata"]["generation"] == 4 and obj["spec"]["sql"] == SQL_WHERE
    refusals = [e for e in k.list("Event", ns) if e.get("reason") == "RollbackRefused"]
    assert any("frozen" in e["message"] for e in refusals), refusals

    # a request with nothing to roll back to (a query with no upgrade yet) changes no spec; it says why
    k.create(manifest(ns, topic, SQL, name="solo"))
    eventually(lambda: (status_of(k, ns, "solo").get("plan") or None), timeout=60, what="solo's plan")
    k.patch("StreamingQuery", ns, "solo", {"metadata": {"annotations": {ROLLBACK_REQUEST: "by-hand"}}})
    obj = eventually(lambda: answered(k, ns, "solo", "by-hand"), timeout=60, what="solo's request answered")
    assert obj["metadata"]["annotations"][ROLLBACK_RESULT] == (
        "refused: no upgrade history (status.history is empty): there is no previous plan to roll back to")
    assert obj["metadata"]["generation"] == 1 and obj["spec"]["sql"] == SQL
    assert any("by-hand" in e["message"] for e in k.list("Event", ns) if e.get("reason") == "RollbackRefused"
               and e["involvedObject"]["name"] == "solo")

    # the namespace of the kubeconfig's context, and clear errors
    config = yaml.safe_load(kube.kubeconfig.read_text())
    for ctx in config["contexts"]:
        ctx["context"]["namespace"] = ns
    own = tmp_path / "kubeconfig"
    own.write_text(yaml.safe_dump(config))
    assert run(kube, "sluice", "history", "sq/totals", "--kubeconfig", str(own)).stdout.startswith(
        f"sq/totals in {ns}: ")
    done = run(kube, "sluice", "history", "sq/nope", "-n", ns, ok=False)
    assert done.returncode == 1
    assert done.stderr == f'error: streamingquery "nope" not found in namespace "{ns}"\n'
    done = run(kube, "sluice", "rollback", "sq/totals", "-n", ns, "--to", "0123456789ab", ok=False)
    assert done.returncode == 1
    assert "no ConfigMap of plan 0123456789ab (totals-plan-0123456789ab)" in done.stderr


def test_a_replan_on_offer_is_shown_and_accepted_through_kubectl(kube: Any, namespace: str, kafka: str,
                                                                 crds: None, tmp_path: Path) -> None:
    """An operator of a later build (its compiler plans the same SQL differently) keeps the pinned
    plan, offers its own; kubectl shows the offer and accepts it; the operator rolls it out."""
    ns, k, topic = namespace, Kube(kube.api), f"kr-{uuid.uuid4().hex[:6]}"
    k.create({"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
              "metadata": {"name": "default", "namespace": ns},
              "spec": {"serviceId": "kr", "kafka": {"bootstrapServers": kafka}, "drainSeconds": 10}})
    k.create(manifest(ns, topic, SQL))
    first_operator = OperatorProcess(kube, ns, tmp_path / "operator.log")
    try:
        pinned = eventually(settled(k, ns, 1), timeout=60, what="the query's first plan pinned")["plan"]
    finally:
        first_operator.stop()
    assert "no re-plan on offer" in run(kube, "sluice", "replan", "sq/totals", "-n", ns).stdout
    later = OperatorProcess.later_build(kube.kubeconfig, ns, tmp_path / "later.log")
    try:
        offered = eventually(lambda: status(k, ns)["plan"].get("replan"), timeout=60,
                             what="the later build's plan on offer")
        assert offered["decision"] == "in-place" and status(k, ns)["plan"]["hash"] == pinned["hash"]
        wide = run(kube, "get", "sq", "-n", ns, "-o", "wide").stdout.splitlines()
        assert "REPLAN" in wide[0].split() and "in-place" in wide[1].split()
        text = run(kube, "sluice", "plan", "sq/totals", "-n", ns, "-o", "text").stdout
        assert f"re-plan on offer: plan {offered['hash'][:12]} (transparent, in-place)" in text
        assert "maxOffsetsPerTrigger" in text
        dry = json.loads(run(kube, "sluice", "replan", "sq/totals", "-n", ns, "--dry-run").stdout)
        assert dry == {"metadata": {"annotations": {"sluice.dev/replan": offered["hash"]}}}
        assert "accepted" in run(kube, "sluice", "replan", "sq/totals", "-n", ns).stdout
        st = eventually(lambda: (s := status(k, ns)).get("rollout", {}).get("step") == "Verifying" and s,
                        timeout=60, what="the re-plan rolling out")
        assert st["rollout"]["targetHash"] == offered["hash"]
        DriverSide(kube.api, ns).take_over(offered["hash"], batches=3,
                                           engine=st["engine"]["digest"])
        st = eventually(lambda: (s := status(k, ns)).get("plan", {}).get("hash") == offered["hash"]
                        and not s.get("rollout") and s, timeout=60, what="the re-plan carried out")
        assert "replan" not in st["plan"] and st["lastUpgrade"]["cause"] == "replan"
        history = run(kube, "sluice", "history", "sq/totals", "-n", ns).stdout
        assert "re-plan accepted" in history
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{later.tail()}") from None
    finally:
        later.stop()
