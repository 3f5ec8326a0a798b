"""sluice-runtime flag/environment parsing, Spark conf precedence, step registry completeness, a
backfill's output topic and start position."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from sluice.core.plan import model
from sluice.core.versions import dead_letter_topics
from sluice_runtime import cli
from sluice_runtime.config import start_from_millis, start_from_options
from sluice_runtime.pipeline import with_output_topic
from sluice_runtime.session import effective_conf
from sluice_runtime.steps import BuildContext, builder_for
from sluice_runtime.steps.source import starting_options


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


def test_checkpoint_file_manager_is_the_file_system_one_unless_the_user_sets_one() -> None:
    key = "spark.sql.streaming.checkpointFileManagerClass"
    assert effective_conf(_plan())[key].endswith(".FileSystemBasedCheckpointFileManager")
    assert effective_conf(_plan(), {key: "my.Manager"})[key] == "my.Manager"


def test_default_query_id() -> None:
    assert cli.default_query_id("abcdef0123456789ffff") == "plan-abcdef0123456789"


def test_unknown_step_type() -> None:
    with pytest.raises(ValueError, match="filterV9"):
        builder_for("filterV9")


# -- a backfill's output topic and start --------------------------------------------------------

REQUIRED = {"SLUICE_PLAN": "p.json", "SLUICE_CHECKPOINT": "/ck", "SLUICE_BOOTSTRAP": "h:1"}


def test_output_topic_and_start_from_come_from_the_environment_or_the_flags() -> None:
    c = _resolve([], REQUIRED)
    assert c.output_topic is None and c.start_from is None
    env = {**REQUIRED, "SLUICE_OUTPUT_TOPIC": "orders-v2", "SLUICE_START_FROM": "earliest"}
    c = _resolve([], env)
    assert (c.output_topic, c.start_from) == ("orders-v2", "earliest")
    c = _resolve(["--output-topic", "orders-v3", "--start-from", "2026-11-20T10:00:00Z"], env)
    assert (c.output_topic, c.start_from) == ("orders-v3", "2026-11-20T10:00:00Z")
    c = _resolve([], {**REQUIRED, "SLUICE_OUTPUT_TOPIC": " ", "SLUICE_START_FROM": ""})
    assert c.output_topic is None and c.start_from is None  # empty: not set


@pytest.mark.parametrize("value", ["latest", "Earliest", "yesterday", "2026-11-20", "2026-11-20T10:00:00",
                                   "1795168800000", "2026-13-20T10:00:00Z", "1969-12-31T23:59:59Z"])
def test_a_start_neither_earliest_nor_an_rfc3339_time_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(cli.ConfigError, match="SLUICE_START_FROM"):
        _resolve([], {**REQUIRED, "SLUICE_START_FROM": value})


def test_an_output_topic_kafka_would_refuse_is_refused_naming_the_variable() -> None:
    with pytest.raises(cli.ConfigError, match="SLUICE_OUTPUT_TOPIC"):
        _resolve(["--output-topic", "orders v2"], REQUIRED)


@pytest.mark.parametrize(("value", "millis"), [
    ("2026-11-20T10:00:00Z", 1795168800000),
    ("2026-11-20t10:00:00z", 1795168800000),
    ("2026-11-20T11:00:00+01:00", 1795168800000),
    ("2026-11-20T10:00:00.250Z", 1795168800250),
    ("2026-11-20T10:00:00.123456789Z", 1795168800123),
    ("1970-01-01T00:00:00Z", 0),
])
def test_a_time_start_is_spark_s_starting_timestamp_in_milliseconds(value: str, millis: int) -> None:
    assert start_from_millis(value) == millis
    assert start_from_options(value) == {"startingTimestamp": str(millis),
                                         "startingOffsetsByTimestampStrategy": "latest"}


def test_an_earliest_start_is_spark_s_earliest_offsets() -> None:
    assert start_from_millis("earliest") is None
    assert start_from_options("earliest") == {"startingOffsets": "earliest"}


def _two_sources_plan() -> model.Plan:
    cols = [model.FieldSpec(name="a", type="int")]
    return model.Plan(
        steps=[
            model.KafkaSourceV1(id="s1", schema=cols, source="s1", topic="t1", columns=cols,
                                starting_offsets="latest"),
            model.KafkaSourceV1(id="s2", schema=cols, source="s2", topic="t2", columns=cols,
                                malformed=model.MalformedHandling(policy="deadLetter", topic="t2-bad")),
            model.UnionV1(id="u", inputs=["s1", "s2"], schema=cols),
            model.KafkaSinkV1(id="sink", inputs=["u"], schema=cols, topic="o"),
        ],
        output_schema=cols,
    ).with_hash()


def _ctx(plan: model.Plan, **kw: typing.Any) -> BuildContext:
    return BuildContext(spark=None, plan=plan, bootstrap="h:1", query_id="q", **kw)  # type: ignore[arg-type]


def test_where_each_source_starts() -> None:
    plan = _two_sources_plan()
    s1, s2 = plan.step("s1"), plan.step("s2")
    assert isinstance(s1, model.KafkaSourceV1) and isinstance(s2, model.KafkaSourceV1)
    # as the plan says
    assert [starting_options(s, _ctx(plan)) for s in (s1, s2)] == [
        {"startingOffsets": "latest"}, {"startingOffsets": "earliest"}]
    # a backfill's start: every source, whatever the plan says
    ctx = _ctx(plan, start_from="2026-11-20T10:00:00Z")
    assert starting_options(s1, ctx) == starting_options(s2, ctx) == {
        "startingTimestamp": "1795168800000", "startingOffsetsByTimestampStrategy": "latest"}
    # hand-off offsets win for their topics; the warm-up reads its own offsets whatever is set
    ctx = _ctx(plan, start_from="earliest", start_offsets={"t1": '{"t1":{"0":7}}'})
    assert starting_options(s1, ctx) == {"startingOffsets": '{"t1":{"0":7}}'}
    assert starting_options(s2, ctx) == {"startingOffsets": "earliest"}
    warm = _ctx(plan, start_from="earliest", warm_offsets={"t2": '{"t2":{"0":90}}'})
    assert starting_options(s1, warm) == {"startingOffsets": "latest"}
    assert starting_options(s2, warm) == {"startingOffsets": '{"t2":{"0":90}}'}


def test_an_output_topic_replaces_the_sink_topic_and_keeps_the_pinned_hash(tmp_path: typing.Any) -> None:
    plan = _two_sources_plan()
    (tmp_path / "plan.json").write_text(plan.to_json())
    config = cli.RunConfig(plan=str(tmp_path / "plan.json"), checkpoint="/ck", bootstrap="h:1",
                           output_topic="o-v2")
    loaded = cli.load_plan(config)
    assert loaded.sink.topic == "o-v2" and loaded.hash == plan.hash
    assert loaded.compute_hash() != plan.hash  # the content differs: the hash is the pinned plan's
    assert [s.id for s in loaded.steps] == [s.id for s in plan.steps]
    # what derives from the sink topic follows it: the default dead-letter topic of a source, left
    # out or written into the plan by the compiler (``<sink topic>.dlq``); one named otherwise stays
    for default in (None, "o.dlq"):
        with_default_dlq = plan.model_copy(update={"steps": [
            plan.steps[0].model_copy(update={"malformed": model.MalformedHandling(topic=default)}),
            *plan.steps[1:]]})
        assert dead_letter_topics(with_output_topic(with_default_dlq, "o-v2")) == ["o-v2.dlq", "t2-bad"]
    # without one: the plan as pinned; a plan file without a hash gets the hash of its content
    assert cli.load_plan(dataclasses.replace(config, output_topic=None)) == plan
    unhashed = plan.model_copy(update={"hash": ""})
    assert with_output_topic(unhashed, "x").hash == plan.hash


def test_the_executor_pod_template_is_written_for_spark(tmp_path: typing.Any) -> None:
    base = ["--plan", "p.json", "--checkpoint", "/ck", "--bootstrap", "h:1"]
    template = '{"apiVersion": "v1", "kind": "Pod", "spec": {"securityContext": {"runAsNonRoot": true}}}'
    config = _resolve(base, {"SLUICE_EXECUTOR_POD_TEMPLATE": template})
    conf = cli.executor_template_conf(config, tmp_path)
    path = conf["spark.kubernetes.executor.podTemplateFile"]
    assert open(path).read() == template
    assert cli.executor_template_conf(_resolve(base), tmp_path) == {}
    for bad in ("{not json", '["a"]', '{"kind": "Service"}'):
        with pytest.raises(cli.ConfigError, match="SLUICE_EXECUTOR_POD_TEMPLATE"):
            _resolve(base, {"SLUICE_EXECUTOR_POD_TEMPLATE": bad})


def test_who_writes_exactly_once_output_defaults_to_the_driver_and_takes_the_tasks() -> None:
    assert _resolve([], REQUIRED).eos_writers == "driver"
    assert _resolve([], {**REQUIRED, "SLUICE_EOS_WRITERS": "tasks"}).eos_writers == "tasks"
    with pytest.raises(cli.ConfigError, match="SLUICE_EOS_WRITERS: 'executors'"):
        _resolve([], {**REQUIRED, "SLUICE_EOS_WRITERS": "executors"})
