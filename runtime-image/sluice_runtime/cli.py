"""``sluice-runtime run``: execute a pinned plan.

Every flag can also come from the environment (pods pass settings that way); a flag given on the
command line wins over its variable. Spark settings pinned by the plan always win over both.

====================  ========================  ========================================
flag                  variable                  default
====================  ========================  ========================================
--plan                SLUICE_PLAN               (required) path of the plan JSON
--checkpoint          SLUICE_CHECKPOINT         (required) checkpoint directory, or s3a://bucket/prefix
(none)                SLUICE_S3_ENDPOINT, ...   with an s3a:// checkpoint: SLUICE_S3_ENDPOINT (none:
                                                AWS), SLUICE_S3_PATH_STYLE, SLUICE_S3_REGION and
                                                AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (none: the
                                                default chain) make S3A's settings
                                                (``sluice_runtime.config.object_store_conf``)
--bootstrap           SLUICE_BOOTSTRAP          (required) Kafka bootstrap servers
--master              SLUICE_MASTER             local[2]
--conf k=v            SLUICE_SPARK_CONF         Spark settings (comma or newline separated)
--jars a,b            SLUICE_JARS               extra jars (the Kafka connector outside the image)
--resolve-connector   SLUICE_RESOLVE_CONNECTOR  off: without jars, let Spark download the connector
--available-now       SLUICE_AVAILABLE_NOW      process what is in the topics, then exit 0
--http-addr           SLUICE_HTTP_ADDR          0.0.0.0:8080 (``off`` disables the endpoint)
--query-id            SLUICE_QUERY_ID           plan-<first 16 hex digits of the plan hash>
--consumer-group      SLUICE_CONSUMER_GROUP     (none) prefix of every consumer group used
--transactional-id    SLUICE_TRANSACTIONAL_ID   sluice-<query id>
(none)                SLUICE_KAFKA_TLS*, ...    Kafka security, see ``sluice_runtime.kafka_security``
--lease-name          SLUICE_LEASE_NAME         (none: no election) the query's driver Lease
--lease-namespace     SLUICE_LEASE_NAMESPACE    namespace of the Lease
--pod-name            SLUICE_POD_NAME           this driver's pod (role label, identity)
--lease-seconds       SLUICE_LEASE_SECONDS      10
(none)                SLUICE_STANDBY_EXECUTORS  hold: with executors (a k8s:// master), every standby
                                                runs its own; ``release``: a standby holds none,
                                                the Lease's holder asks for them
                                                (``sluice_runtime.standby_executors``)
(none)                SLUICE_ENGINE             (none) the digest of the engine the operator deployed
                                                this driver with, echoed in its Lease records
(none)                SLUICE_MEMORY_LIMIT       (none) the driver container's memory limit (bytes or a
                                                Kubernetes quantity): spark.driver.memory and, with
                                                a local master, RocksDB's bound derive from it
                                                (``sluice.core.sizing``; sparkConf wins)
(none)                SLUICE_MEMORY_REQUEST     (none) the same from its request, without a limit
(none)                SLUICE_PREVIOUS_VERSION   (none) a replaced version's predecessor (JSON,
                                                see ``sluice.core.replace``)
--output-topic        SLUICE_OUTPUT_TOPIC       (none: the plan's sink topic) the topic the sink
                                                writes (a backfill's); plan and hash unchanged
--start-from          SLUICE_START_FROM         (none: as the plan says) ``earliest`` or an RFC 3339
                                                time: where every source starts on a checkpoint
                                                without offsets
(none)                SLUICE_SCHEMA_REGISTRY_URL (none) the Confluent-compatible schema registry of
                                                avro sources (with optional ``_USERNAME`` and
                                                ``_PASSWORD``: basic auth; ``_CA``: the PEM of
                                                an https registry's CA)
(none)                SLUICE_SINK_SCHEMA_ID     (none) the id the operator registered an avro sink's
                                                schema under (required with an avro sink)
(none)                SLUICE_SINK_KEY_SCHEMA_ID (none) the same for an avro sink key's schema
                                                (required with ``keyFormat: avro`` on the sink)
====================  ========================  ========================================

With a Lease name the process is one of the query's drivers: it warms up, waits as a standby and
runs the plan only while it holds the Lease (see :mod:`sluice_runtime.driver`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.core import sizing
from sluice.core.naming import EXECUTOR_POD_TEMPLATE_CONF, EXECUTOR_POD_TEMPLATE_ENV
from sluice.core.replace import (
    OUTPUT_TOPIC_ENV,
    PREVIOUS_VERSION_ENV,
    START_FROM_ENV,
    PreviousVersion,
    PreviousVersionError,
)

from sluice_runtime.avro import AvroConfigError, AvroSettings, startup_problems
from sluice_runtime.config import (
    EOS_WRITERS,
    ObjectStoreConfigError,
    RunConfig,
    StartFromError,
    object_store_conf,
    start_from_millis,
)
from sluice_runtime.kafka_security import KafkaSecurity, KafkaSecurityError, with_jvm_options
from sluice_runtime.kafka_security import from_env as kafka_security_from_env
from sluice_runtime.standby_executors import HOLD, STANDBY_EXECUTORS_ENV, plan_for, start_conf

if TYPE_CHECKING:
    from sluice.core.plan.model import Plan

log = logging.getLogger("sluice_runtime")

#: the engine digest the operator deployed this driver with
ENGINE_ENV = "SLUICE_ENGINE"

TRUE = {"1", "true", "yes", "on"}


class ConfigError(ValueError):
    pass


#: what Kafka accepts as a topic name
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def parse_conf_items(items: Sequence[str]) -> dict[str, str]:
    """``k=v`` items (each may itself hold several, comma or newline separated), or a JSON object
    (what the operator puts in ``SLUICE_SPARK_CONF``: values may contain commas)."""
    out: dict[str, str] = {}
    for item in items:
        if item.strip().startswith("{"):
            try:
                data = json.loads(item)
            except ValueError as exc:
                raise ConfigError(f"Spark settings are not valid JSON: {exc}") from exc
            if not isinstance(data, dict):
                raise ConfigError("Spark settings JSON must be an object of key: value")
            out.update({str(k): str(v) for k, v in data.items()})
            continue
        for part in item.replace("\n", ",").split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Spark setting must be key=value, got {part!r}")
            out[key.strip()] = value.strip()
    return out


#: what a refusal or warning names for the driver container's memory
MEMORY_FIELDS = {
    sizing.MEMORY_LIMIT_ENV: "the driver container's memory limit (SLUICE_MEMORY_LIMIT: QueryCluster "
    "spec.driver.limits.memory, or StreamingQuery spec.resources.driver.limits.memory)",
    sizing.MEMORY_REQUEST_ENV: "the driver container's memory request (SLUICE_MEMORY_REQUEST: QueryCluster "
    "spec.driver.requests.memory, or StreamingQuery spec.resources.driver.requests.memory)",
}


def memory_from_env(env: Mapping[str, str]) -> sizing.Container | None:
    """The driver container's memory: ``SLUICE_MEMORY_LIMIT``, else ``SLUICE_MEMORY_REQUEST`` (bytes,
    as the Downward API gives them, or a quantity such as ``2Gi``); None without either."""
    for var, limit in ((sizing.MEMORY_LIMIT_ENV, True), (sizing.MEMORY_REQUEST_ENV, False)):
        text = (env.get(var) or "").strip()
        if not text:
            continue
        try:
            mib = sizing.quantity_mib(text)
        except sizing.QuantityError as exc:
            raise ConfigError(f"{var}: {exc}") from None
        return sizing.Container(mib, MEMORY_FIELDS[var], limit=limit)
    return None


def kafka_from_env(env: Mapping[str, str]) -> KafkaSecurity:
    """The Kafka security settings of ``SLUICE_KAFKA_*`` (see :mod:`sluice_runtime.kafka_security`)."""
    try:
        return kafka_security_from_env(env)
    except KafkaSecurityError as exc:
        raise ConfigError(str(exc)) from exc


def _flag_bool(flag: bool | None, value: str | None) -> bool:
    return flag if flag is not None else (value or "").strip().lower() in TRUE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice-runtime", description="Run a pinned Sluice plan.")
    # handled in main() before parsing; here for --help
    parser.add_argument("--version", action="store_true",
                        help="print Spark, Scala, Java and connector versions (then --output json|text)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("executor", help="run a Spark executor (in pods Spark's Kubernetes scheduler creates)")
    sub.add_parser("purge", help="delete a deleted query's checkpoints from an object store (--prefix s3a://...)")
    run = sub.add_parser("run", help="run a plan")
    run.add_argument("--plan")
    run.add_argument("--checkpoint")
    run.add_argument("--bootstrap")
    run.add_argument("--master")
    run.add_argument("--conf", action="append", default=[], metavar="K=V")
    run.add_argument("--jars")
    run.add_argument("--resolve-connector", action="store_true", default=None)
    run.add_argument("--available-now", action="store_true", default=None)
    run.add_argument("--http-addr")
    run.add_argument("--query-id")
    run.add_argument("--consumer-group")
    run.add_argument("--transactional-id")
    run.add_argument("--lease-name")
    run.add_argument("--lease-namespace")
    run.add_argument("--pod-name")
    run.add_argument("--lease-seconds")
    run.add_argument("--output-topic")
    run.add_argument("--start-from", metavar="earliest|RFC3339")
    run.add_argument("--log-level", default=os.environ.get("SLUICE_LOG_LEVEL", "INFO"))
    return parser


def resolve_config(args: argparse.Namespace, env: Mapping[str, str]) -> RunConfig:
    """Merge flags over environment variables over defaults."""

    def pick(flag: Any, var: str, default: Any = None) -> Any:
        if flag is not None:
            return flag
        return env.get(var, default)

    plan = pick(args.plan, "SLUICE_PLAN")
    checkpoint = pick(args.checkpoint, "SLUICE_CHECKPOINT")
    bootstrap = pick(args.bootstrap, "SLUICE_BOOTSTRAP")
    missing = [
        n for n, v in (("--plan", plan), ("--checkpoint", checkpoint), ("--bootstrap", bootstrap)) if not v
    ]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} (or SLUICE_PLAN/SLUICE_CHECKPOINT/SLUICE_BOOTSTRAP)")
    conf = parse_conf_items([env.get("SLUICE_SPARK_CONF", "")])
    conf.update(parse_conf_items(args.conf))
    try:  # a checkpoint in an object store: S3A's settings from SLUICE_S3_* (flags and env win)
        conf = {**object_store_conf(checkpoint, env), **conf}
    except ObjectStoreConfigError as exc:
        raise ConfigError(str(exc)) from None
    jars_text = pick(args.jars, "SLUICE_JARS", "")
    available_now = _flag_bool(args.available_now, env.get("SLUICE_AVAILABLE_NOW"))
    http_addr = pick(args.http_addr, "SLUICE_HTTP_ADDR", "0.0.0.0:8080")
    if http_addr in ("", "off", "none"):
        http_addr = None
    lease_name = pick(args.lease_name, "SLUICE_LEASE_NAME") or None
    lease_namespace = pick(args.lease_namespace, "SLUICE_LEASE_NAMESPACE") or None
    if lease_name and not lease_namespace:
        raise ConfigError("--lease-name needs --lease-namespace (or SLUICE_LEASE_NAMESPACE)")
    lease_text = str(pick(args.lease_seconds, "SLUICE_LEASE_SECONDS", "10"))
    try:
        lease_seconds = float(lease_text)
    except ValueError:
        raise ConfigError(f"SLUICE_LEASE_SECONDS must be a number of seconds, got {lease_text!r}") from None
    if not 3 <= lease_seconds <= 300:
        raise ConfigError(f"SLUICE_LEASE_SECONDS must be between 3 and 300, got {lease_text!r}")
    previous_text = env.get(PREVIOUS_VERSION_ENV) or ""
    try:
        previous = PreviousVersion.from_json(previous_text) if previous_text.strip() else None
    except PreviousVersionError as exc:
        raise ConfigError(str(exc)) from None
    output_topic = str(pick(args.output_topic, OUTPUT_TOPIC_ENV) or "").strip() or None
    if output_topic is not None and not _TOPIC.fullmatch(output_topic):
        raise ConfigError(f"SLUICE_OUTPUT_TOPIC must be a Kafka topic name (up to 249 of a-z A-Z 0-9 . _ -), "
                          f"got {output_topic!r}")
    start_from = str(pick(args.start_from, START_FROM_ENV) or "").strip() or None
    if start_from is not None:
        try:
            start_from_millis(start_from)
        except StartFromError as exc:
            raise ConfigError(f"SLUICE_START_FROM (--start-from): {exc}") from None
    template = (env.get(EXECUTOR_POD_TEMPLATE_ENV) or "").strip() or None
    if template is not None:
        try:
            parsed = json.loads(template)
        except ValueError as exc:
            raise ConfigError(f"{EXECUTOR_POD_TEMPLATE_ENV} must be a JSON pod template: {exc}") from None
        if not isinstance(parsed, dict) or parsed.get("kind", "Pod") != "Pod":
            raise ConfigError(f"{EXECUTOR_POD_TEMPLATE_ENV} must be a JSON object of kind Pod")
    try:
        avro_settings = AvroSettings.from_env(env)
    except AvroConfigError as exc:
        raise ConfigError(str(exc)) from None
    eos_writers = (env.get("SLUICE_EOS_WRITERS") or "driver").strip()
    if eos_writers not in EOS_WRITERS:
        raise ConfigError(f"SLUICE_EOS_WRITERS: {eos_writers!r} is neither of {', '.join(EOS_WRITERS)}")
    standby_executors = (env.get(STANDBY_EXECUTORS_ENV) or HOLD).strip()
    try:
        plan_for(conf, pick(args.master, "SLUICE_MASTER", "local[2]"), standby_executors, bool(lease_name))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return RunConfig(
        plan=plan,
        checkpoint=checkpoint,
        bootstrap=bootstrap,
        master=pick(args.master, "SLUICE_MASTER", "local[2]"),
        conf=conf,
        jars=[j for j in jars_text.split(",") if j.strip()],
        available_now=available_now,
        http_addr=http_addr,
        query_id=pick(args.query_id, "SLUICE_QUERY_ID"),
        kafka=kafka_from_env(env),
        consumer_group=pick(args.consumer_group, "SLUICE_CONSUMER_GROUP") or None,
        transactional_id=pick(args.transactional_id, "SLUICE_TRANSACTIONAL_ID") or None,
        resolve_connector=_flag_bool(args.resolve_connector, env.get("SLUICE_RESOLVE_CONNECTOR")),
        lease_name=lease_name,
        lease_namespace=lease_namespace,
        pod_name=pick(args.pod_name, "SLUICE_POD_NAME") or None,
        lease_seconds=lease_seconds,
        previous=previous,
        output_topic=output_topic,
        start_from=start_from,
        executor_pod_template=template,
        engine=(env.get(ENGINE_ENV) or "").strip(),
        memory=memory_from_env(env),
        avro=avro_settings,
        eos_writers=eos_writers,
        standby_executors=standby_executors,
    )


def executor_template_conf(config: RunConfig, directory: Path) -> dict[str, str]:
    """Write the executor pod template into ``directory`` and name it to Spark (it reads the file
    when it creates executor pods); nothing without a template."""
    if config.executor_pod_template is None:
        return {}
    path = directory / "executor-pod-template.json"
    path.write_text(config.executor_pod_template, encoding="utf-8")
    return {EXECUTOR_POD_TEMPLATE_CONF: str(path)}


def default_query_id(plan_hash: str) -> str:
    return f"plan-{plan_hash[:16]}"


def load_plan(config: RunConfig) -> Plan:
    """The pinned plan, its sink writing ``config.output_topic`` when one is set (with the pinned
    plan's hash: the version reports the plan it runs, not the topic it writes)."""
    from sluice.core.plan.model import Plan

    from sluice_runtime import compat
    from sluice_runtime.pipeline import with_output_topic

    text = Path(config.plan).read_bytes()
    compat.check(text)  # a plan of a newer format or another Spark line: refused before the JVM starts
    plan = Plan.from_json(text)
    if config.output_topic:
        plan = with_output_topic(plan, config.output_topic)
    return plan


def _plan_hash_of(path: str) -> str:
    try:
        return str(json.loads(Path(path).read_bytes()).get("hash") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def execute(config: RunConfig) -> int:
    from sluice_runtime import compat, connector, driver, kafka_admin, priority, reports
    from sluice_runtime.brokerlag import BrokerLag
    from sluice_runtime.pipeline import build_pipeline, renewed_avro
    from sluice_runtime.server import RuntimeState, parse_interval, readiness_bound, serve
    from sluice_runtime.session import create_spark, driver_sizing
    from sluice_runtime.steps.source import skipping_sources

    reports.ENGINE = config.engine  # every record this process writes names the engine it runs on
    try:
        plan = load_plan(config)
    except compat.PlanIncompatible as exc:
        print(f"sluice-runtime: not started: {exc.error_class}: {exc}", file=sys.stderr)
        if config.lease_name:
            driver.report_refusal(config, _plan_hash_of(config.plan), exc.error_class, str(exc))
        return 1
    query_id = config.query_id or default_query_id(plan.hash or plan.compute_hash())
    avro_problems = startup_problems(plan, config.avro)
    if avro_problems:
        message = "; ".join(avro_problems)
        print(f"sluice-runtime: not started: {message}", file=sys.stderr)
        if config.lease_name:
            driver.report_refusal(config, plan.hash or plan.compute_hash(), "AvroSettingsMissing", message)
        return 1
    try:  # the heap is fixed when the JVM starts: a container too small for it is refused before
        sized = driver_sizing(plan, config.conf, config.master, config.memory)
    except sizing.SizingError as exc:
        print(f"sluice-runtime: not started: {exc}", file=sys.stderr)
        if config.lease_name:
            driver.report_refusal(config, plan.hash or plan.compute_hash(), "ContainerTooSmall", str(exc))
        return 1
    if sized is not None:
        b = sized.budget
        log.info("memory: container %d MiB: heap %d MiB, JVM %d MiB, Python %d MiB, RocksDB %d MiB (%s)",
                 b.container, b.heap, b.jvm, b.python, b.rocksdb,
                 ", ".join(f"{k}={v}" for k, v in sorted(sized.conf.items())) or "all set in sparkConf")
        for warning in sized.warnings:
            log.warning("memory: %s", warning)
    # Fail fast, before the JVM starts, when the brokers refuse the TLS/SASL settings.
    kafka_admin.connect(config.bootstrap, config.kafka)
    started = time.monotonic()
    state = RuntimeState(bound=readiness_bound(parse_interval(plan.sink.trigger.processing_time)))
    drain_requested = threading.Event()
    state.on_drain = drain_requested.set
    if config.lease_name:  # one of several drivers: never "active" before it holds the Lease
        state.role = "warming"
        state.identity = driver.identity_for(config.pod_name or "")
        priority.lower_priority()  # before the JVM starts: it inherits the standby's priority
    server = serve(state, config.http_addr) if config.http_addr else None

    def on_signal(signum: int, frame: Any) -> None:
        del frame
        log.info("signal %s: draining", signum)
        drain_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    conf = {**executor_template_conf(config, Path(tempfile.gettempdir())), **config.conf}
    if config.resolve_connector:
        fallback = connector.fallback_conf(
            config.jars, conf, submit_args=os.environ.get("PYSPARK_SUBMIT_ARGS", "")
        )
        if fallback:
            log.info("Kafka connector: resolving %s with Spark", fallback["spark.jars.packages"])
        conf = {**fallback, **conf}
    conf = with_jvm_options(conf, config.kafka)  # Kafka's system properties, before the JVM starts
    standby = plan_for(conf, config.master, config.standby_executors, bool(config.lease_name))
    conf = start_conf(conf, standby)  # a standby that releases executors starts without
    spark = create_spark(plan, config.master, conf, config.jars, own_session=True, memory=config.memory)
    state.plan_hash = plan.hash or plan.compute_hash()
    state.metrics.plan.labels(state.plan_hash).set(1)
    state.metrics.watch_skipping(skipping_sources(plan))
    try:
        if config.lease_name:
            return driver.run_elected(config, plan, spark, state, drain_requested, query_id, standby)

        def start(avro: AvroSettings) -> Any:
            return build_pipeline(
                spark,
                plan,
                checkpoint=config.checkpoint,
                bootstrap=config.bootstrap,
                query_id=query_id,
                available_now=config.available_now,
                security=config.kafka,
                consumer_group=config.consumer_group,
                transactional_id=config.transactional_id,
                eos_writers=config.eos_writers,
                start_from=config.start_from,
                avro=avro,
            )

        pipeline = start(config.avro)
        log.info(
            "query %s started (plan %s, Kafka %s) in %.1fs",
            query_id, plan.hash[:12], config.kafka.protocol, time.monotonic() - started,
        )
        end = driver.FAILED
        lag = BrokerLag(state.metrics, config.bootstrap, config.kafka).start()
        try:
            end = driver.supervise(pipeline, state, drain_requested)
            # a record with a schema id its avro source's subject did not have at build: fetched
            # anew, the pipeline starts again on the same checkpoint (from the failed batch)
            while end == driver.FAILED and (renewed := renewed_avro(pipeline)) is not None:
                log.warning("avro: a source subject has new schema ids; starting the query again")
                driver.finish(pipeline, state, end)
                end = driver.FAILED
                pipeline = start(renewed)
                end = driver.supervise(pipeline, state, drain_requested)
        finally:
            lag.stop()
            code = driver.finish(pipeline, state, end)
        return code
    finally:
        if server is not None:
            server.shutdown()
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["executor"]:
        # an executor pod created by Spark's Kubernetes scheduler (the image's entry point with
        # the argument ``executor``, as with Spark's own image)
        from sluice_runtime import executor

        return executor.main(argv[1:])
    if argv[:1] == ["purge"]:
        # a deleted query's objects in an object store (the operator's ``<query>-purge`` pod)
        from sluice_runtime import purge

        return purge.main(argv[1:])
    if argv[:1] == ["--version"]:
        # the versions this runtime carries (the image's manifest): `--version [--output json]`
        from sluice_runtime import versions

        return versions.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = resolve_config(args, os.environ)
    except ConfigError as exc:
        parser.error(str(exc))
    from sluice_runtime.kafka_admin import KafkaSetupError

    try:
        return execute(config)
    except KafkaSetupError as exc:
        print(f"sluice-runtime: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
