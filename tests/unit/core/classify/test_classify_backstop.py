"""The checkpoint backstop: pure checks (core) and reading a checkpoint's files (runtime)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from sluice.core.classify.backstop import (
    SIGNATURE_VERSION,
    CheckpointFacts,
    StateOperator,
    check,
    comparable,
    state_signature,
)
from sluice_runtime import backstop

from tests.support.classify_plans import agg_plan, join_plan


def test_same_plan_passes() -> None:
    p = agg_plan()
    facts = CheckpointFacts(
        conf=p.settings.spark_conf(),
        operators=[StateOperator(0, "stateStoreSave")],
        signature=state_signature(p),
    )
    assert check(p, facts) == []


def test_same_type_group_key_is_caught() -> None:
    facts = CheckpointFacts(signature=state_signature(agg_plan()))
    problems = check(agg_plan(group="region"), facts)
    assert len(problems) == 1
    assert "aggregate-1" in problems[0] and "customer" in problems[0] and "region" in problems[0]


def test_count_to_sum_is_caught() -> None:
    facts = CheckpointFacts(signature=state_signature(agg_plan()))
    assert any("aggregates" in p for p in check(agg_plan(fn="sum", arg="amount"), facts))


def test_inner_to_outer_is_caught() -> None:
    facts = CheckpointFacts(signature=state_signature(join_plan()))
    assert any("joinType" in p for p in check(join_plan("leftOuter"), facts))


def test_pinned_conf_and_operators() -> None:
    p = agg_plan()
    conf = {**p.settings.spark_conf(), "spark.sql.shuffle.partitions": "200"}
    problems = check(p, CheckpointFacts(conf=conf, operators=[StateOperator(0, "symmetricHashJoin")]))
    assert any("spark.sql.shuffle.partitions=200" in x for x in problems)
    assert any("symmetricHashJoin" in x and "aggregate-1" in x for x in problems)
    problems = check(
        p, CheckpointFacts(operators=[StateOperator(0, "stateStoreSave"), StateOperator(1, "dedupe")])
    )
    assert any("2 stateful operator" in x for x in problems)


def test_runtime_reads_checkpoint_files(tmp_path: Path) -> None:
    p = agg_plan()
    (tmp_path / "offsets").mkdir()
    conf = {**p.settings.spark_conf(), "spark.sql.shuffle.partitions": "3"}
    for n in (0, 1, 10):
        (tmp_path / "offsets" / str(n)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": 0, "conf": conf if n == 10 else {}}) + "\n{}\n"
        )
    meta = tmp_path / "state" / "0" / "_metadata"
    meta.mkdir(parents=True)
    (meta / "metadata").write_text(
        "v1\n"
        + json.dumps(
            {
                "operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"},
                "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 3}],
            }
        )
    )
    backstop.record(tmp_path, p)
    facts = backstop.read_facts(tmp_path)
    assert facts.conf["spark.sql.shuffle.partitions"] == "3"
    assert [(o.operator_id, o.name, o.stores) for o in facts.operators] == [
        (0, "stateStoreSave", ["default"])
    ]
    assert facts.signature == json.loads(json.dumps(state_signature(p)))
    problems = backstop.verify(tmp_path, agg_plan(group="region"))
    assert any("shuffle.partitions=3" in x for x in problems)
    assert any("aggregate-1" in x for x in problems)


def test_the_signature_records_its_version_and_resolves_join_keys_on_their_sides() -> None:
    p = join_plan()
    signature = state_signature(p)
    assert signature["version"] == SIGNATURE_VERSION and comparable(json.loads(json.dumps(signature)))
    keys = [["`orders.customer:string`", "`payments.customer:string`"]]
    assert signature["steps"]["join-1"]["keys"] == keys


@pytest.mark.parametrize("version", [1, SIGNATURE_VERSION + 1, None, str(SIGNATURE_VERSION), "x"])
def test_a_signature_of_another_version_is_not_compared(version: object) -> None:
    """A signature of another version (or none, or a malformed one) is not comparable: the checkpoint
    is checked as one that records no signature (never a mismatch, never an error), its pinned
    settings and stateful operators still are."""
    recorded = {**json.loads(json.dumps(state_signature(join_plan()))), "version": version}
    if version is None:
        del recorded["version"]
    assert not comparable(recorded)
    changed = join_plan("leftOuter")
    assert check(changed, CheckpointFacts(signature=recorded)) == []
    same_version = {**recorded, "version": SIGNATURE_VERSION}
    assert any("joinType" in x for x in check(changed, CheckpointFacts(signature=same_version)))
    conf = {**changed.settings.spark_conf(), "spark.sql.shuffle.partitions": "200"}
    problems = check(changed, CheckpointFacts(conf=conf, operators=[StateOperator(0, "dedupe")],
                                              signature=recorded))
    assert any("shuffle.partitions=200" in x for x in problems)
    assert any("dedupe" in x for x in problems)
    assert not any("joinType" in x for x in problems)


def test_only_a_json_object_is_comparable() -> None:
    assert not comparable(None) and not comparable([SIGNATURE_VERSION]) and not comparable(SIGNATURE_VERSION)


def test_runtime_does_not_compare_a_signature_of_another_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = agg_plan()
    backstop.record(tmp_path, p, engine="e1")
    path = tmp_path / backstop.SIGNATURE_FILE
    assert backstop.has_signature(tmp_path) and backstop.verify(tmp_path, agg_plan(group="region"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "version": SIGNATURE_VERSION + 1}))
    with caplog.at_level(logging.WARNING, logger="sluice_runtime.backstop"):
        assert backstop.verify(tmp_path, agg_plan(group="region")) == []
    assert f"version {SIGNATURE_VERSION + 1}" in caplog.text
    # not one this runtime compares, but the plan and engine it names are still read
    assert not backstop.has_signature(tmp_path)
    assert (backstop.recorded_plan(tmp_path), backstop.recorded_engine(tmp_path)) == (p.hash, "e1")
    # a signature that cannot be read is not compared either (and fails nothing)
    for text in ("{not json", "[2]"):
        path.write_text(text)
        assert backstop.verify(tmp_path, agg_plan(group="region")) == []
        assert not backstop.has_signature(tmp_path) and backstop.recorded_plan(tmp_path) is None
