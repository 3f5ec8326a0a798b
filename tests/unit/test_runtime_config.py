"""sluice-runtime flag/environment parsing, Spark conf precedence, step registry completeness."""

from __future__ import annotations

import typing

import pytest
from sluice.core.plan import model
from sluice_runtime import cli
from sluice_runtime.session import effective_conf
from sluice_runtime.steps import REGISTRY, builder_for


def _resolve(argv: list[str], env: dict[str, str] | None = None) -> cli.RunConfig:
    args = cli.build_parser().parse_args(["run", *argv])
    return cli.resolve_config(args, env or {})


def test_flags() -> None:
    c = _resolve(
        [
            "--plan",
            "p.json",
            "--checkpoint",
            "/ck",
            "--bootstrap",
            "h:1",
            "--master",
            "local[1]",
            "--conf",
            "a=1",
            "--conf",
            "b=2,c=3",
            "--available-now",
            "--http-addr",
            "127.0.0.1:9",
            "--query-id",
            "q1",
            "--jars",
            "x.jar,y.jar",
        ]
    )
    assert (c.plan, c.checkpoint, c.bootstrap, c.master) == ("p.json", "/ck", "h:1", "local[1]")
    assert c.conf == {"a": "1", "b": "2", "c": "3"}
    assert c.available_now and c.http_addr == "127.0.0.1:9" and c.query_id == "q1"
    assert c.jars == ["x.jar", "y.jar"]


def test_env_and_defaults() -> None:
    env = {
        "SLUICE_PLAN": "p.json",
        "SLUICE_CHECKPOINT": "/ck",
        "SLUICE_BOOTSTRAP": "h:1",
        "SLUICE_SPARK_CONF": "a=1\nb=2, c = 3",
        "SLUICE_AVAILABLE_NOW": "true",
        "SLUICE_QUERY_ID": "q",
        "SLUICE_KAFKA_SASL_MECHANISM": "PLAIN",
        "SLUICE_KAFKA_SASL_USERNAME": "u",
        "SLUICE_KAFKA_SASL_PASSWORD": "p",
        "SLUICE_KAFKA_BOOTSTRAP": "ignored:1",  # exported by .platform/env, not a client setting
    }
    c = _resolve([], env)
    assert c.plan == "p.json" and c.master == "local[2]" and c.http_addr == "0.0.0.0:8080"
    assert c.conf == {"a": "1", "b": "2", "c": "3"}
    assert c.available_now and c.query_id == "q"
    assert c.kafka.protocol == "SASL_PLAINTEXT" and c.kafka.sasl_username == "u"
    assert c.consumer_group is None and c.transactional_id is None and not c.resolve_connector


def test_flag_beats_env() -> None:
    env = {
        "SLUICE_PLAN": "env.json",
        "SLUICE_CHECKPOINT": "/ck",
        "SLUICE_BOOTSTRAP": "h:1",
        "SLUICE_SPARK_CONF": "a=env,b=env",
        "SLUICE_HTTP_ADDR": "off",
    }
    c = _resolve(["--plan", "flag.json", "--conf", "a=flag"], env)
    assert c.plan == "flag.json" and c.conf == {"a": "flag", "b": "env"} and c.http_addr is None
    assert not c.available_now


def test_missing_required() -> None:
    with pytest.raises(cli.ConfigError, match="--checkpoint"):
        _resolve(["--plan", "p", "--bootstrap", "h:1"])


def test_bad_conf_item() -> None:
    with pytest.raises(cli.ConfigError, match="key=value"):
        cli.parse_conf_items(["novalue"])


def _plan() -> model.Plan:
    cols = [model.FieldSpec(name="a", type="int")]
    return model.Plan(
        settings=model.PinnedSettings(shuffle_partitions=3),
        steps=[
            model.KafkaSourceV1(id="src", schema=cols, source="s", topic="t", columns=cols),
            model.KafkaSinkV1(id="sink", inputs=["src"], schema=cols, topic="o"),
        ],
        output_schema=cols,
    )


def test_pinned_settings_win() -> None:
    conf = effective_conf(
        _plan(), {"spark.sql.shuffle.partitions": "99", "spark.ui.enabled": "true", "x": "y"}, ["/a.jar"]
    )
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith("RocksDBStateStoreProvider")
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert conf["spark.ui.enabled"] == "true" and conf["x"] == "y" and conf["spark.jars"] == "/a.jar"
    assert effective_conf(_plan())["spark.ui.enabled"] == "false"


def test_default_query_id() -> None:
    assert cli.default_query_id("abcdef0123456789ffff") == "plan-abcdef0123456789"


def _step_types() -> set[str]:
    step_union = typing.get_args(typing.get_args(model.Step)[0])
    return {cls.model_fields["type"].default for cls in step_union}


def test_every_step_type_has_a_builder() -> None:
    types = _step_types()
    assert len(types) == 11
    assert types == set(REGISTRY)
    for t in types:
        assert callable(builder_for(t))


def test_unknown_step_type() -> None:
    with pytest.raises(ValueError, match="filterV9"):
        builder_for("filterV9")
