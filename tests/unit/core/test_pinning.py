"""Pinned plans (pure): Spark versions, the settings a plan pins, the plan inputs digest, engine
changes and the re-plan on offer."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.core import pinning, sparkversion
from sluice.core.classify import classify
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.engine import EngineFacts, engine_changes, plan_inputs, query_digest, rewrites_checkpoint
from sluice.core.errors import CompileError
from sluice.core.plan import meaning
from sluice.core.spec import QuerySpec, UpgradePolicy

QUERY: dict[str, Any] = {
    "sources": [{"name": "orders", "topic": "orders", "schema": [
        {"name": "customer", "type": "string"}, {"name": "amount", "type": "double"}]}],
    "sql": "SELECT customer, amount FROM orders WHERE amount > 0",
    "sink": {"topic": "out"},
}
COUNT = {**QUERY, "sql": "SELECT customer, count(*) AS n FROM orders GROUP BY customer",
         "sink": {"topic": "out", "outputMode": "update", "key": ["customer"]}}


def query(**overrides: object) -> QuerySpec:
    return QuerySpec.model_validate({**QUERY, **overrides})


def engine(digest: str = "e1", image: str = "rt:1", spark: str = "4.3.0", conf: dict[str, str] | None = None,
           **workload: object) -> EngineFacts:
    return EngineFacts(digest=digest, image=image, spark_version=spark, spark_conf=conf or {},
                       workload=workload)


# -- Spark versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "verdict"), [
    ("4.3.0", "4.3.1", "same"), ("4.3.1", "4.3.0", "same"), ("4.3.0", "4.4.0", "upgrade"),
    ("4.3.2", "4.5", "upgrade"), ("4.3.0", "4.2.9", "downgrade"), ("4.3.0", "5.0.0", "major"),
    ("4.3.0", "3.5.4", "major"),
])
def test_spark_moves(old: str, new: str, verdict: str) -> None:
    moved = sparkversion.move(old, new)
    assert moved.verdict == verdict
    assert moved.allowed == (verdict in ("same", "upgrade"))
    assert old in moved.message and new in moved.message


def test_a_runtime_runs_plans_of_its_own_spark_line_only() -> None:
    assert sparkversion.runs_on("4.3.0", "4.3.2") is None
    why = sparkversion.runs_on("4.4.0", "4.3.0")
    assert why is not None and "4.4.0" in why and "4.3.0" in why and "sparkVersion" in why
    with pytest.raises(sparkversion.BadVersion):
        sparkversion.parse("four")
    assert sparkversion.parse("4.3.0-SNAPSHOT") == (4, 3, 0) and sparkversion.line("4.3") == "4.3"


# -- the settings a plan pins -------------------------------------------------------------------


def test_a_plan_pins_every_setting_that_changes_results_or_state() -> None:
    plan = compile_query(query())
    conf = plan.settings.conf or {}
    assert set(conf) == {m.key for m in meaning.MEANINGS}
    assert conf["spark.sql.session.timeZone"] == "UTC" and conf["spark.sql.ansi.enabled"] == "true"
    assert plan.spark_version == "4.3.0"
    # the runtime applies them all, over anything else
    assert plan.settings.spark_conf()["spark.sql.session.timeZone"] == "UTC"


def test_the_cluster_settings_and_spark_enter_the_plan() -> None:
    target = CompileTarget("4.4.1", {"spark.sql.session.timeZone": "Europe/Paris",
                                     "spark.sql.streaming.stateStore.providerClass": "x.Provider",
                                     "spark.executor.cores": "2"})
    plan = compile_query(query(), target)
    assert plan.spark_version == "4.4.1"
    assert (plan.settings.conf or {})["spark.sql.session.timeZone"] == "Europe/Paris"
    assert plan.settings.state_store_provider == "x.Provider"
    assert "spark.executor.cores" not in plan.settings.spark_conf()  # a tuning setting: not in the plan


def test_shuffle_partitions_belong_to_the_query() -> None:
    with pytest.raises(CompileError) as caught:
        compile_query(query(), CompileTarget(spark_conf={"spark.sql.shuffle.partitions": "4"}))
    problem = caught.value.problems[0]
    assert problem.field == "the QueryCluster spec.sparkConf" and "spec.shufflePartitions" in problem.message


def test_defaults_of_spark_lines_this_operator_does_not_know_are_explicit_too() -> None:
    assert meaning.defaults_for("4.9.0") == meaning.DEFAULTS["4.3"]  # a later minor: the newest known
    assert meaning.defaults_for("4.0.0") == meaning.DEFAULTS["4.3"]  # an older one: the oldest known
    assert meaning.defaults_for("5.1.0") == meaning.DEFAULTS["4.3"]


@pytest.mark.parametrize(("key", "stateless", "stateful"), [
    ("spark.sql.session.timeZone", "data-selection", "topology"),
    ("spark.sql.ansi.enabled", "data-selection", "topology"),
    ("spark.sql.streaming.stateStore.compression.codec", "topology", "topology"),
])
def test_a_change_of_a_pinned_setting_is_classified_by_its_kind(key: str, stateless: str,
                                                                 stateful: str) -> None:
    for spec, expected in ((QUERY, stateless), (COUNT, stateful)):
        q = QuerySpec.model_validate(spec)
        old = compile_query(q)
        new = compile_query(q, CompileTarget(spark_conf={key: "zstd" if "codec" in key else "false"}))
        result = classify(old, new)
        assert result.category == expected, result.reasons
        assert key in result.reasons[-1] or key in " ".join(result.reasons)


def test_a_plan_compiled_before_settings_were_pinned_takes_them_without_a_change() -> None:
    new = compile_query(query())
    old = new.model_copy(update={"settings": new.settings.model_copy(update={"conf": None})}).with_hash()
    assert classify(old, new).category == "transparent"  # only the wiring reason: nothing pinned moved


@pytest.mark.parametrize(("new", "category", "decision"), [
    ("4.3.7", "none", "none"), ("4.5.0", "transparent", "in-place"), ("4.2.0", "unsupported", "reject"),
    ("5.0.0", "unsupported", "reject"),
])
def test_the_plans_spark_version(new: str, category: str, decision: str) -> None:
    old = compile_query(query())
    moved = compile_query(query(), CompileTarget(new))
    result = classify(old, moved, UpgradePolicy())
    if category == "none":  # a patch release of the same line compiles another hash, in place
        assert result.decision == "in-place"
        return
    assert (result.category, result.decision) == (category, decision), result.reasons


# -- plan inputs ------------------------------------------------------------------------------


def test_the_inputs_digest_ignores_defaults_and_patch_releases() -> None:
    base = plan_inputs(query(), engine())
    written_out = query(trigger={}, sink={"topic": "out", "format": "json", "outputMode": "append"})
    assert plan_inputs(written_out, engine()) == base  # defaults spelt out: the same inputs
    assert plan_inputs(query(), engine(spark="4.3.5")) == base  # a patch release: the same plan
    assert plan_inputs(query(), engine(image="rt:2", conf={"spark.executor.cores": "4"})) == base
    assert plan_inputs(query(), engine(spark="4.4.0")).engine != base.engine
    assert plan_inputs(query(), engine(conf={"spark.sql.ansi.enabled": "false"})).engine != base.engine
    assert plan_inputs(query(sql=QUERY["sql"] + " "), engine()).query != base.query
    assert query_digest(query()) == base.query


# -- engine changes ---------------------------------------------------------------------------


def test_engine_changes_are_in_place_except_a_spark_that_cannot_read_the_checkpoint() -> None:
    old = engine(conf={"spark.executor.cores": "2", "spark.sql.ansi.enabled": "true"},
                 **{"driver.limits.memory": "2Gi"})
    new = engine(digest="e2", image="rt:2",
                 conf={"spark.executor.cores": "4", "spark.sql.ansi.enabled": "false"},
                 **{"driver.limits.memory": "3Gi"})
    changes = engine_changes(old, new)
    assert [(c.field, c.category) for c in changes] == [
        ("image", "transparent"), ("sparkConf.spark.executor.cores", "transparent"),
        ("driver.limits.memory", "transparent")]  # ANSI is a plan setting: the plan comparison's
    assert [c.category for c in engine_changes(engine(), engine(spark="4.2.0"))] == ["unsupported"]
    assert [c.category for c in engine_changes(engine(), engine(spark="4.4.0"))] == ["transparent"]
    assert rewrites_checkpoint(old, new) and rewrites_checkpoint(old, engine(spark="4.4.0"))
    assert not rewrites_checkpoint(old, engine(conf={"spark.executor.cores": "8"}))


def test_engine_changes_decide_an_upgrade_of_an_unchanged_plan() -> None:
    plan = compile_query(query())
    result = classify(plan, plan, extra=engine_changes(engine(), engine(digest="e2", image="rt:2")))
    assert (result.category, result.decision) == ("transparent", "in-place")
    refused = classify(plan, plan, extra=engine_changes(engine(), engine(digest="e2", spark="5.0.0")))
    assert refused.decision == "reject"


# -- the re-plan on offer ---------------------------------------------------------------------


def test_a_replan_is_accepted_by_its_own_hash_only() -> None:
    h = "0123456789abcdef" * 4
    assert pinning.accepts(h, h) and pinning.accepts(h[:12], h) and pinning.accepts(h[:12].upper(), h)
    assert not pinning.accepts(h[:11], h) and not pinning.accepts(None, h)
    assert not pinning.accepts("f" * 12, h)


def test_the_replan_record_says_what_carrying_it_out_would_be() -> None:
    old = compile_query(query())
    new = compile_query(query(sources=[{**QUERY["sources"][0], "maxOffsetsPerTrigger": 100}]))
    record = pinning.replan_record(classify(old, new), new.hash, "0.2.0")
    assert record.hash == new.hash and record.decision == "in-place"
    assert record.compiler == "0.2.0" and pinning.REPLAN_ANNOTATION in record.message
    refused = pinning.refused_record("line 1: nope", "0.2.0")
    assert refused.decision == "reject" and refused.hash == ""
