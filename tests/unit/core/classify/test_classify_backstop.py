"""The checkpoint backstop: pure checks (core) and reading a checkpoint's files (runtime)."""

from __future__ import annotations

import json
from pathlib import Path

from sluice.core.classify.backstop import CheckpointFacts, StateOperator, check, state_signature
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


def test_signature_recorded_by_version_1_is_compared_in_version_1() -> None:
    """Checkpoints recorded before signature version 2 stay usable (and keep catching changes)."""
    p = join_plan()
    v1 = json.loads(json.dumps(state_signature(p, 1)))
    assert v1["version"] == 1 and state_signature(p)["version"] == 2
    assert v1["steps"]["join-1"]["keys"] == [["`orders.customer:string`", "`orders.customer:string`"]]
    assert state_signature(p)["steps"]["join-1"]["keys"] == [
        ["`orders.customer:string`", "`payments.customer:string`"]
    ]
    assert check(p, CheckpointFacts(signature=v1)) == []
    assert any("joinType" in x for x in check(join_plan("leftOuter"), CheckpointFacts(signature=v1)))
