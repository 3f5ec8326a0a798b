"""``sluice-runtime run``: execute a pinned plan.

Every flag can also come from the environment (pods pass settings that way); a flag given on the
command line wins over its variable. Spark settings pinned by the plan always win over both.

====================  ========================  ========================================
flag                  variable                  default
====================  ========================  ========================================
--plan                SLUICE_PLAN               (required) path of the plan JSON
--checkpoint          SLUICE_CHECKPOINT         (required) checkpoint directory
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
====================  ========================  ========================================
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_runtime.kafka_security import KafkaSecurity, KafkaSecurityError
from sluice_runtime.kafka_security import from_env as kafka_security_from_env

log = logging.getLogger("sluice_runtime")

TRUE = {"1", "true", "yes", "on"}


@dataclass
class RunConfig:
    plan: str
    checkpoint: str
    bootstrap: str
    master: str = "local[2]"
    conf: dict[str, str] = field(default_factory=dict)
    jars: list[str] = field(default_factory=list)
    available_now: bool = False
    http_addr: str | None = "0.0.0.0:8080"
    query_id: str | None = None
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)
    #: ids the operator assigned (``status.identity``); None: derived from the query id
    consumer_group: str | None = None
    transactional_id: str | None = None
    resolve_connector: bool = False


class ConfigError(ValueError):
    pass


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
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("executor", help="run a Spark executor (in pods Spark's Kubernetes scheduler creates)")
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
    jars_text = pick(args.jars, "SLUICE_JARS", "")
    available_now = _flag_bool(args.available_now, env.get("SLUICE_AVAILABLE_NOW"))
    http_addr = pick(args.http_addr, "SLUICE_HTTP_ADDR", "0.0.0.0:8080")
    if http_addr in ("", "off", "none"):
        http_addr = None
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
    )


def default_query_id(plan_hash: str) -> str:
    return f"plan-{plan_hash[:16]}"


# --------------------------------------------------------------------------------------------
def _monitor(pipeline: Any, state: Any, stop: threading.Event) -> None:
    """Poll the queries' progress into metrics and readiness (runs in a thread)."""
    seen = -1
    while not stop.is_set():
        try:
            main = pipeline.main
            for q in pipeline.all_queries():
                state.metrics.observe_recent(str(q.name), q.recentProgress, q.isActive)
            active = main.isActive
            exc = main.exception()
            for q in pipeline.dead_letter.values():
                exc = exc or q.exception()
            state.health.active = active
            state.health.exception = str(exc.desc if hasattr(exc, "desc") else exc) if exc else None
            last = main.lastProgress
            status = main.status if active else {}
            batch = int(last["batchId"]) if last else -1
            caught_up = bool(status) and status.get("isDataAvailable") is False
            if batch > seen or (active and caught_up):
                state.health.last_progress_at = time.monotonic()
            seen = max(seen, batch)
        except Exception as exc:  # never let the monitor die
            log.debug("monitor: %s", exc)
        stop.wait(1.0)


def execute(config: RunConfig) -> int:
    from sluice.core.plan.model import Plan

    from sluice_runtime import connector, kafka_admin
    from sluice_runtime import drain as drain_mod
    from sluice_runtime.pipeline import build_pipeline
    from sluice_runtime.server import RuntimeState, parse_interval, readiness_bound, serve
    from sluice_runtime.session import create_spark

    plan = Plan.from_json(Path(config.plan).read_bytes())
    query_id = config.query_id or default_query_id(plan.hash or plan.compute_hash())
    # Fail fast, before the JVM starts, when the brokers refuse the TLS/SASL settings.
    kafka_admin.connect(config.bootstrap, config.kafka)
    started = time.monotonic()
    state = RuntimeState(bound=readiness_bound(parse_interval(plan.sink.trigger.processing_time)))
    drain_requested = threading.Event()
    state.on_drain = drain_requested.set
    server = serve(state, config.http_addr) if config.http_addr else None

    def on_signal(signum: int, frame: Any) -> None:
        del frame
        log.info("signal %s: draining", signum)
        drain_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    conf = dict(config.conf)
    if config.resolve_connector:
        fallback = connector.fallback_conf(
            config.jars, conf, submit_args=os.environ.get("PYSPARK_SUBMIT_ARGS", "")
        )
        if fallback:
            log.info("Kafka connector: resolving %s with Spark", fallback["spark.jars.packages"])
        conf = {**fallback, **conf}
    spark = create_spark(plan, config.master, conf, config.jars)
    pipeline = build_pipeline(
        spark,
        plan,
        checkpoint=config.checkpoint,
        bootstrap=config.bootstrap,
        query_id=query_id,
        available_now=config.available_now,
        security=config.kafka,
        consumer_group=config.consumer_group,
        transactional_id=config.transactional_id,
    )
    log.info(
        "query %s started (plan %s, Kafka %s) in %.1fs",
        query_id, plan.hash[:12], config.kafka.protocol, time.monotonic() - started,
    )
    stop_monitor = threading.Event()
    threading.Thread(target=_monitor, args=(pipeline, state, stop_monitor), daemon=True).start()
    code = 0
    try:
        while True:
            if drain_requested.is_set():
                state.health.draining = True
                clean = drain_mod.drain(pipeline.gate, pipeline.queries())
                log.info("drained%s", "" if clean else " (a commit did not appear in time)")
                code = 0 if clean else 1
                break
            queries = pipeline.all_queries()
            failed = [q for q in queries if not q.isActive and q.exception() is not None]
            if failed:
                exc = failed[0].exception()
                print(
                    f"sluice-runtime: query {failed[0].name} failed: {getattr(exc, 'desc', exc)}",
                    file=sys.stderr,
                )
                code = 1
                break
            if not any(q.isActive for q in queries):
                log.info("all queries finished")
                break
            time.sleep(0.2)
    finally:
        stop_monitor.set()
        for q in pipeline.all_queries():
            try:
                if q.isActive:
                    q.stop()
            except Exception:
                pass
        if pipeline.eos_sink is not None:
            pipeline.eos_sink.close()
        if server is not None:
            server.shutdown()
        spark.stop()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["executor"]:
        # an executor pod created by Spark's Kubernetes scheduler (the image's entry point with
        # the argument ``executor``, as with Spark's own image)
        from sluice_runtime import executor

        return executor.main(argv[1:])
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
