"""The admission webhook's decisions (``sluice.core.admission``, pure): what ``kubectl apply`` is told.

Objects are the dicts the API server sends; a query's pinned plan is written into its status the way
the operator writes it (hash, ConfigMap, version) and the ConfigMap's ``plan.json`` is passed as the
running plan, as the kopf side reads it.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.core import admission
from sluice.core.admission import RunningPlan, SpecModels, Verdict, review_cluster, review_query
from sluice.core.compiler import compile_query
from sluice.core.spec import QuerySpec
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec

from tests.support import records
from tests.support.upgrade_corpus import load, pair_files

MODELS = SpecModels(query=StreamingQuerySpec, cluster=QueryClusterSpec)

SQL = """SELECT customer, count(*) AS n
FROM orders
GROUP BY customer"""


def query(sql: str = SQL, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sources": [{"name": "orders", "topic": "orders", "schema": [
            {"name": "order_id", "type": "string"}, {"name": "customer", "type": "string"},
            {"name": "seller", "type": "string"}, {"name": "amount", "type": "double"}]}],
        "sql": sql,
        "sink": {"topic": "orders-by-customer", "outputMode": "update"},
    }
    body.update(spec)
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": "totals", "namespace": "shop", "uid": "u-1", "generation": 1}, "spec": body}


def pinned(obj: dict[str, Any], **status: Any) -> tuple[dict[str, Any], RunningPlan]:
    """``obj`` with the plan its spec compiles to pinned in its status, and that plan's ConfigMap."""
    plan = compile_query(QuerySpec.model_validate(obj["spec"]))
    digest = plan.hash or plan.compute_hash()
    cm = f"{obj['metadata']['name']}-plan-{digest[:12]}"
    out = copy.deepcopy(obj)
    out["status"] = {"plan": {"hash": digest, "version": 1, "configMap": cm}, "phase": "Running", **status}
    return out, RunningPlan(config_map=cm, text=plan.to_json())


def edited(old: dict[str, Any], **spec: Any) -> dict[str, Any]:
    new = copy.deepcopy(old)
    new["spec"].update(spec)
    new["metadata"]["generation"] += 1
    return new


def update(new: dict[str, Any], old: dict[str, Any], running: RunningPlan | None,
           cluster_upgrade: dict[str, Any] | None = None) -> Verdict:
    return review_query("UPDATE", new, old, {} if cluster_upgrade is None else cluster_upgrade, models=MODELS,
                        running_plan=running)


# -- validation ------------------------------------------------------------------------------------


def test_a_valid_query_is_admitted_without_a_word() -> None:
    assert review_query("CREATE", query(), None, {}, models=MODELS) == Verdict(True)


def test_sql_errors_name_the_field_line_and_column() -> None:
    verdict = review_query("CREATE", query("SELECT customer, count(*) AS n\nFROM orders\nGROUP BY custmer"),
                           None, {}, models=MODELS)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == ("spec.sql: line 3, column 10: column 'custmer' does not exist in source "
                               "'orders'; did you mean 'customer'?")


def test_sql_that_does_not_parse_names_line_and_column() -> None:
    verdict = review_query("CREATE", query("SELECT customer,\nFROM orders"), None, {}, models=MODELS)
    assert not verdict.allowed
    assert verdict.message == ("spec.sql: line 1, column 16: this comma is followed by 'FROM', so the list "
                               "ends with nothing after the comma; remove the trailing comma")


def test_spec_problems_outside_the_sql_name_their_field() -> None:
    bad_source = query()
    bad_source["spec"]["sources"][0]["schema"][1]["type"] = "strnig"
    verdict = review_query("CREATE", bad_source, None, {}, models=MODELS)
    assert not verdict.allowed and verdict.message.startswith("spec.sources[0].schema[1].type: ")
    assert "strnig" in verdict.message


def test_pydantic_refusals_name_the_field() -> None:
    late = query(upgrade={"replaceStrategy": "backfill", "backfillFrom": "yesterday"})
    verdict = review_query("CREATE", late, None, {}, models=MODELS)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message.startswith("spec.upgrade.backfillFrom: ")
    assert "'yesterday' is not an RFC 3339 time" in verdict.message

    verdict = review_query("CREATE", query(sinkk={"topic": "x"}), None, {}, models=MODELS)
    assert verdict.message == "spec.sinkk: Extra inputs are not permitted"

    missing = query()
    del missing["spec"]["sink"]
    verdict = review_query("CREATE", missing, None, {}, models=MODELS)
    assert verdict.message == "spec.sink: Field required"

    both = query(standbyReplicas=9, cleanup={"retention": "x"})
    two = review_query("CREATE", both, None, {}, models=MODELS)
    assert "spec.cleanup.retention: " in two.message and "spec.standbyReplicas: " in two.message  # every one


def test_a_missing_cluster_is_a_warning_not_a_refusal() -> None:
    verdict = review_query("CREATE", query(clusterRef={"name": "analytics"}), None, None, models=MODELS)
    assert verdict.allowed
    assert verdict.warnings == ["QueryCluster 'analytics' not found in namespace 'shop': the query waits for "
                                "it (ClusterNotFound)"]


# -- updates that change nothing the user would notice ----------------------------------------------


def test_metadata_and_status_updates_pass_untouched_even_over_a_bad_spec() -> None:
    """The operator's finalizer and annotation writes go through the webhook: a query stored while the
    webhook was bypassed must not block them (no running plan is read either)."""
    old = query("SELECT nope FROM orders")
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["sluice.dev/finalizer"]
    new["status"] = {"phase": "Degraded"}
    assert review_query("UPDATE", new, old, None, models=MODELS, running_plan=None) == Verdict(True)


@pytest.mark.parametrize("change", [
    {"suspend": True},
    {"resources": {"driver": {"limits": {"memory": "3Gi"}}}},
    {"restartNonce": "2"},
    {"sql": "select customer,  COUNT(*) as n from orders -- same plan\ngroup by customer"},
    {"trigger": {"processingTime": "30 seconds"}},  # a new plan, but a transparent change
], ids=["suspend", "resources", "restart", "reformatted-sql", "transparent"])
def test_spec_edits_nobody_would_notice_get_no_warning(change: dict[str, Any]) -> None:
    old, running = pinned(query())
    assert update(edited(old, **change), old, running) == Verdict(True)


def test_before_a_plan_is_pinned_an_edit_is_only_validated() -> None:
    old = query()
    new = edited(old, sql=SQL.replace("FROM orders", "FROM orders WHERE amount > 3"))
    assert review_query("UPDATE", new, old, {}, models=MODELS) == Verdict(True)


# -- in-place upgrades ------------------------------------------------------------------------------


def test_a_new_filter_is_announced_as_an_in_place_upgrade() -> None:
    old, running = pinned(query())
    new = edited(old, sql=SQL.replace("FROM orders", "FROM orders WHERE amount > 3"))
    verdict = update(new, old, running)
    assert verdict.allowed
    assert verdict.warnings[0] == "data-selection change: in-place upgrade, same checkpoint"
    assert verdict.warnings[1].startswith("Step filter-1 (filterV1) was added; it does not hold state")


def test_a_new_output_column_is_announced_as_schema_evolution() -> None:
    old, running = pinned(query())
    verdict = update(edited(old, sql=SQL.replace("AS n", "AS n, sum(amount) AS total")), old, running)
    # a new aggregate is new state: topology, not only a column; a plain column stays in place
    assert verdict.warnings[0].startswith("topology change: replace with hand-off")
    old, running = pinned(query("SELECT order_id, customer FROM orders", sink={"topic": "o"}))
    verdict = update(edited(old, sql="SELECT order_id, customer, amount FROM orders"), old, running)
    assert verdict.warnings[0] == "schema-evolution change: in-place upgrade, same checkpoint"
    assert "output column 'amount double' added" in verdict.warnings[1]


# -- replaces ---------------------------------------------------------------------------------------


def test_a_new_grouping_key_is_a_replace_with_hand_off_by_default() -> None:
    old, running = pinned(query())
    verdict = update(edited(old, sql=SQL.replace("customer", "seller")), old, running)
    assert verdict.allowed
    assert verdict.warnings[0] == ("topology change: replace with hand-off, output stays on topic "
                                   "orders-by-customer (plan version 2, new checkpoint)")
    assert verdict.warnings[1] == "state starts empty: running aggregates restart from zero"
    assert verdict.warnings[2].startswith("Step aggregate-1: grouping keys changed from ['customer'] to "
                                          "['seller'].")
    # reasons longer than the API server passes on are cut, and the last line says where to read them
    assert all(len(w) <= admission.WARNING_MAX for w in verdict.warnings)
    assert verdict.warnings[-1].startswith("every reason in full: status.lastUpgrade.reasons once applied")


def test_a_replace_with_backfill_says_where_the_output_moves() -> None:
    old, running = pinned(query())
    new = edited(old, sql=SQL.replace("customer", "seller"), upgrade={"replaceStrategy": "backfill"})
    verdict = update(new, old, running)
    assert verdict.warnings[0] == ("topology change: replace with backfill, output moves to topic "
                                   "orders-by-customer-v2 (plan version 2)")
    # the edit names a new sink topic: the backfill writes there
    new["spec"]["sink"]["topic"] = "orders-by-seller"
    assert update(new, old, running).warnings[0] == (
        "topology change: replace with backfill, output moves to topic orders-by-seller (plan version 2)")


def test_a_replace_counts_versions_from_the_pinned_plan() -> None:
    old, running = pinned(query())
    old["status"]["plan"].update(version=3, outputTopic="orders-by-customer-v3")
    new = edited(old, sql=SQL.replace("customer", "seller"))
    assert update(new, old, running).warnings[0] == (
        "topology change: replace with hand-off, output stays on topic orders-by-customer-v3 "
        "(plan version 4, new checkpoint)")
    new["spec"]["upgrade"] = {"replaceStrategy": "backfill"}
    assert "output moves to topic orders-by-customer-v4" in update(new, old, running).warnings[0]


def test_a_new_source_topic_is_source_modifying() -> None:
    old, running = pinned(query())
    sources = copy.deepcopy(old["spec"]["sources"])
    sources[0]["topic"] = "orders-v2"
    verdict = update(edited(old, sources=sources), old, running)
    assert verdict.warnings[0].startswith("source-modifying change: replace with hand-off")


# -- refusals ---------------------------------------------------------------------------------------


def test_a_replace_the_query_policy_forbids_is_refused_with_the_reasons() -> None:
    old, running = pinned(query())
    new = edited(old, sql=SQL.replace("customer", "seller"), upgrade={"allowReplace": False})
    verdict = update(new, old, running)
    assert not verdict.allowed and verdict.code == 403
    assert verdict.message.startswith("topology change refused: This topology change needs a new checkpoint "
                                      "(replace), but spec.upgrade.allowReplace is false")
    assert "grouping keys" in verdict.message


def test_the_cluster_default_policy_applies_unless_the_query_has_its_own() -> None:
    old, running = pinned(query())
    new = edited(old, sql=SQL.replace("customer", "seller"))
    assert not update(new, old, running, cluster_upgrade={"allowReplace": False}).allowed
    new["spec"]["upgrade"] = {"allowReplace": True}
    assert update(new, old, running, cluster_upgrade={"allowReplace": False}).allowed
    # a cluster that is missing (None): the defaults, which allow a replace
    assert review_query("UPDATE", edited(old, sql=SQL.replace("customer", "seller")), old, None,
                        models=MODELS, running_plan=running).allowed
    # in-place edits pass whatever the policy
    new = edited(old, sql=SQL.replace("FROM orders", "FROM orders WHERE amount > 3"))
    assert update(new, old, running, cluster_upgrade={"allowReplace": False}).allowed


def test_a_missing_running_plan_is_refused_as_the_operator_would() -> None:
    old, running = pinned(query())
    verdict = update(edited(old, sql=SQL.replace("FROM orders", "FROM orders WHERE amount > 3")), old,
                     RunningPlan(running.config_map, None))
    assert not verdict.allowed and verdict.code == 403
    assert f"the running plan's ConfigMap {running.config_map} is missing" in verdict.message


def test_an_unreadable_running_plan_lets_the_operator_decide() -> None:
    old, _ = pinned(query())
    new = edited(old, sql=SQL.replace("customer", "seller"), upgrade={"allowReplace": False})
    verdict = review_query("UPDATE", new, old, None, models=MODELS, running_plan=None,
                           unavailable="GET configmaps: HTTP 403")
    assert verdict.allowed
    assert verdict.warnings == ["the upgrade was not classified here (GET configmaps: HTTP 403); the "
                                "operator classifies it (status.lastUpgrade)"]


# -- rollouts in flight ----------------------------------------------------------------------------


def _in_flight(step: str) -> tuple[dict[str, Any], RunningPlan, RunningPlan]:
    """A query pinned on SQL, rolling out to a WHERE (``step``); the pinned and the target plan."""
    stable, stable_plan = pinned(query())
    target, target_plan = pinned(query(SQL.replace("FROM orders", "FROM orders WHERE amount > 3")))
    obj = copy.deepcopy(target)
    rollout = records.rollout(step, target["status"]["plan"]["hash"], targetPlanVersion=1,
                              targetConfigMap=target_plan.config_map,
                              fromHash=stable["status"]["plan"]["hash"], category="data-selection",
                              decision="in-place", strategy="in-place")
    obj["status"] = {**stable["status"], "rollout": rollout.for_storage()}
    return obj, stable_plan, target_plan


def test_the_plan_an_edit_is_classified_against() -> None:
    obj, stable, target = _in_flight("Verifying")
    assert admission.running_config_map(obj) == target.config_map  # provisionally: the rollout's target
    obj["status"]["rollout"]["step"] = "Failed"  # rollback Never: the workload stays on the target
    assert admission.running_config_map(obj) == target.config_map
    obj["status"]["rollout"]["step"] = "RollingBack"
    assert admission.running_config_map(obj) == stable.config_map
    del obj["status"]["rollout"]
    assert admission.running_config_map(obj) == stable.config_map
    assert admission.running_config_map(query()) is None


def test_an_edit_during_a_rollout_is_announced_against_its_target() -> None:
    obj, _, target = _in_flight("Verifying")
    new = edited(obj, sql=SQL.replace("FROM orders", "FROM orders WHERE amount > 3 AND seller <> 'x'"))
    verdict = update(new, obj, target)
    assert verdict.allowed
    assert verdict.warnings[0].startswith("an upgrade is in flight (Verifying, to plan ")
    assert verdict.warnings[1] == "data-selection change: in-place upgrade, same checkpoint"


def test_a_refusal_during_a_rollout_is_left_to_the_operator() -> None:
    """The operator classifies the edit once the rollout ended, maybe against another plan."""
    obj, _, target = _in_flight("Applying")
    new = edited(obj, sql=SQL.replace("customer", "seller"), upgrade={"allowReplace": False})
    verdict = update(new, obj, target)
    assert verdict.allowed
    assert verdict.warnings[1].startswith("topology change: refused, the query stays on plan ")


def test_reverting_during_a_rollout_says_it_is_rolled_back() -> None:
    obj, stable, _ = _in_flight("Verifying")
    verdict = update(edited(obj, sql=SQL), obj, stable)
    assert verdict.allowed and len(verdict.warnings) == 1
    assert "the upgrade in flight (Verifying, to plan" in verdict.warnings[0]
    assert verdict.warnings[0].endswith("is rolled back (Cancelled)")


def test_an_edit_back_to_a_failed_rollout_target_is_quiet() -> None:
    obj, _, target = _in_flight("Failed")
    new = edited(obj, sql=SQL.replace("FROM orders", "FROM  orders  WHERE amount > 3"))
    assert update(new, obj, target) == Verdict(True)


# -- the corpus: every pair answered as the operator decides -----------------------------------------


@pytest.mark.parametrize("path", pair_files(), ids=lambda p: p.stem)
def test_corpus_pair(path: Path) -> None:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    pair = load(path)
    expect = pair.expect
    old, running = pinned(doc["old"])
    new = copy.deepcopy(doc["new"])
    new["status"] = old["status"]
    verdict = review_query("UPDATE", new, old, {}, models=MODELS, running_plan=running)
    category, decision = expect["category"], expect["decision"]
    if decision == "reject":
        assert not verdict.allowed and verdict.message.startswith(f"{category} change refused: ")
        for text in expect["reasonContains"]:
            assert text in verdict.message
    elif decision == "replace":
        assert verdict.allowed and verdict.warnings[0].startswith(f"{category} change: replace with ")
    elif category in ("data-selection", "schema-evolution"):
        assert verdict.allowed
        assert verdict.warnings[0] == f"{category} change: in-place upgrade, same checkpoint"
    else:
        assert verdict == Verdict(True)
    assert all(len(w) <= admission.WARNING_MAX for w in verdict.warnings)


# -- QueryCluster ----------------------------------------------------------------------------------


def cluster(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
            "metadata": {"name": "default", "namespace": "shop"},
            "spec": {"serviceId": "shop", "kafka": {"bootstrapServers": "kafka:9092"}, **spec}}


def test_a_cluster_spec_is_validated_with_its_model() -> None:
    assert review_cluster("CREATE", cluster(), None, models=MODELS) == Verdict(True)
    verdict = review_cluster("CREATE", cluster(cleanup={"retention": "soon"}), None, models=MODELS)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message.startswith("spec.cleanup.retention: ")
    assert "'soon' is not a duration such as 30s" in verdict.message
    verdict = review_cluster("UPDATE", cluster(upgrade={"backfillFrom": "1969-12-31T00:00:00Z"}), cluster(),
                             models=MODELS)
    assert verdict.message.startswith("spec.upgrade.backfillFrom: ") and "before 1970" in verdict.message


def test_a_cluster_metadata_update_passes_over_a_bad_spec() -> None:
    bad = cluster(cleanup={"retention": "soon"})
    labelled = copy.deepcopy(bad)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert review_cluster("UPDATE", labelled, bad, models=MODELS) == Verdict(True)


# -- the ValidatingWebhookConfiguration --------------------------------------------------------------


def test_the_webhook_configuration_scopes_and_routes_each_kind() -> None:
    config = admission.webhook_configuration(
        "sluice-operator", {"url": "https://127.0.0.1:9443/", "caBundle": "Q0E="}, failure_policy="Fail",
        timeout_seconds=10, namespaces=["b", "a"])
    hooks = {h["name"]: h for h in config["webhooks"]}
    assert set(hooks) == {"streamingqueries.sluice.dev", "queryclusters.sluice.dev"}
    sq = hooks["streamingqueries.sluice.dev"]
    assert sq["clientConfig"] == {"url": "https://127.0.0.1:9443/validate-streamingquery", "caBundle": "Q0E="}
    assert sq["rules"] == [{"apiGroups": ["sluice.dev"], "apiVersions": ["v1alpha1"],
                            "resources": ["streamingqueries"], "operations": ["CREATE", "UPDATE"],
                            "scope": "Namespaced"}]
    assert (sq["failurePolicy"], sq["timeoutSeconds"], sq["sideEffects"]) == ("Fail", 10, "None")
    assert sq["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}

    cluster_wide = admission.webhook_configuration(
        "sluice-operator", {"service": {"namespace": "sluice", "name": "sluice-webhook", "port": 443},
                            "caBundle": "Q0E="}, failure_policy="Ignore", timeout_seconds=5)
    qc = next(h for h in cluster_wide["webhooks"] if h["name"] == "queryclusters.sluice.dev")
    assert qc["clientConfig"]["service"] == {"namespace": "sluice", "name": "sluice-webhook", "port": 443,
                                             "path": "/validate-querycluster"}
    assert qc["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]


def test_the_webhook_configuration_refuses_what_the_api_server_would() -> None:
    with pytest.raises(ValueError, match="failurePolicy must be Fail or Ignore"):
        admission.webhook_configuration("x", {"url": "https://h"}, failure_policy="fail", timeout_seconds=10)
    with pytest.raises(ValueError, match=r"timeoutSeconds must be 1\.\.30"):
        admission.webhook_configuration("x", {"url": "https://h"}, failure_policy="Fail", timeout_seconds=31)


# -- the operator's side: flags, certificate, registration ------------------------------------------


def operator_args(*argv: str) -> Any:
    from sluice.commands import operator

    parser = argparse.ArgumentParser(prog="sluice")
    operator.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["operator", *argv])


def test_the_webhook_is_off_unless_a_port_is_given() -> None:
    from sluice.commands.operator import webhook_settings

    assert webhook_settings(operator_args()) is None
    # arguments built by hand (tests, benchmarks) without the webhook flags
    assert webhook_settings(argparse.Namespace(namespace=[], kubeconfig=None)) is None


def test_webhook_flags() -> None:
    from sluice.commands.operator import webhook_settings

    s = webhook_settings(operator_args("--webhook-port", "9443", "--webhook-service", "sluice/sluice-webhook",
                                       "--webhook-cert", "/tls/tls.crt", "--webhook-key", "/tls/tls.key",
                                       "--webhook-ca", "/tls/ca.crt", "--webhook-failure-policy", "Ignore",
                                       "--webhook-timeout", "5"))
    assert s is not None
    assert (s.port, s.listen, s.service, s.url) == (9443, "0.0.0.0", ("sluice", "sluice-webhook", 443), None)
    assert (s.certfile, s.keyfile, s.cafile) == ("/tls/tls.crt", "/tls/tls.key", "/tls/ca.crt")
    assert (s.failure_policy, s.timeout_seconds, s.configuration) == ("Ignore", 5, "sluice-operator")
    assert s.hostnames() == ["sluice-webhook", "sluice-webhook.sluice", "sluice-webhook.sluice.svc",
                             "sluice-webhook.sluice.svc.cluster.local"]
    local = webhook_settings(operator_args("--webhook-port", "9443", "--webhook-host", "127.0.0.1",
                                           "--webhook-url", "https://sluice.example:8443/admission"))
    assert local is not None and local.listen == "127.0.0.1" and local.hostnames() == ["sluice.example"]


@pytest.mark.parametrize(("argv", "error"), [
    (["--webhook-timeout", "31"], "--webhook-timeout: 31 is not within 1..30 seconds"),
    (["--webhook-cert", "/tls/tls.crt"], "--webhook-cert and --webhook-key go together"),
    (["--webhook-service", "webhook"], "--webhook-service: 'webhook' is not NAMESPACE/NAME[:PORT]"),
    (["--webhook-url", "http://h:9443"], "--webhook-url: 'http://h:9443' must start with https://"),
    (["--webhook-port", "70000"], "--webhook-port: 70000 is not a port"),
])
def test_wrong_webhook_flags_are_named(argv: list[str], error: str) -> None:
    from sluice.commands.operator import webhook_settings

    argv = argv if argv[0] == "--webhook-port" else ["--webhook-port", "9443", *argv]
    with pytest.raises(ValueError) as exc:
        webhook_settings(operator_args(*argv))
    assert str(exc.value).startswith(error)


def test_the_self_signed_certificate_names_what_the_api_server_calls(tmp_path: Path) -> None:
    import ipaddress
    import ssl

    from cryptography import x509
    from sluice.operator.handlers.admission import self_signed_certificate

    cert_pem, key_pem = self_signed_certificate(["127.0.0.1", "0.0.0.0", "sluice-webhook.sluice.svc"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["sluice-webhook.sluice.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca  # it is its own CA
    (tmp_path / "c.pem").write_bytes(cert_pem)
    (tmp_path / "k.pem").write_bytes(key_pem)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    with pytest.raises(ValueError, match="needs a host name or address"):
        self_signed_certificate(["0.0.0.0"])


def test_the_handlers_are_registered_only_with_a_webhook() -> None:
    import kopf
    from sluice.operator.main import build_registry, register_admission

    registry = build_registry()
    assert registry._webhooks.get_all_handlers() == []  # type: ignore[attr-defined]
    register_admission(registry, kopf.WebhookServer(port=9443))
    ids = {h.id for h in registry._webhooks.get_all_handlers()}  # type: ignore[attr-defined]
    assert ids == {handler_id for _, _, handler_id in admission.WEBHOOKS}


def test_a_refusal_becomes_an_admission_error_and_a_webhook_bug_lets_the_request_through() -> None:
    import kopf
    from sluice.operator.handlers.admission import _answer

    warnings: list[str] = []
    with pytest.raises(kopf.AdmissionError) as exc:
        _answer(lambda: admission.deny("spec.sql: line 1, column 8: nope", code=422), warnings, query())
    assert str(exc.value) == "spec.sql: line 1, column 8: nope" and exc.value.code == 422

    def broken() -> Verdict:
        raise KeyError("plan")

    _answer(broken, warnings, query())
    assert warnings == ["the webhook could not check this (KeyError: 'plan'); the operator checks it when it "
                        "reconciles"]
