"""A schema registry for the local platform: Apicurio Registry with its Confluent-compatible API.

Apicurio Registry (Apache-2.0) 2.6.13.Final is resolved once with Maven: the ``all`` distribution
of ``io.apicurio:apicurio-registry-app`` (a ``tar.gz``, a Quarkus application packaged as a legacy
jar) is copied into ``~/.cache/sluice/apicurio-<VERSION>/`` and unpacked there
(``app/apicurio-registry-app-<VERSION>-runner.jar`` and its ``lib/``). It runs on Java 17, the
platform's default JDK, found as for the broker and the object store (``$JAVA_HOME``, then ``java``
on ``PATH``).

Why 2.6.x and not the 3.x line: Apicurio 3.3.3 (on Java 21+) left about one request in 100 to 200
to a path it has no resource for without an answer (the connection hangs), such as Confluent's
``/associations`` that confluent-kafka's serializers ask by default; 2.6.13.Final answered every
one of 1,000 (docs/formats.md), and needs no second JDK.

Its storage is in memory (the ``all`` distribution's H2 ``jdbc:h2:mem:`` database): every start
begins from an empty registry, as Kafka does, unless a registry started earlier from the same state
dir is alive and answering. It listens on ``address`` (loopback, or the real node's IP so that pods
reach it) on a free port; 2.x has no separate management interface, so its ``/health`` and
``/metrics`` are on that port too. The global compatibility rule is ``BACKWARD``, Confluent Schema
Registry's default, so that a Confluent client sees the behaviour it expects.

The environment the platform exports is ``SLUICE_SCHEMA_REGISTRY_URL``: the base URL a Confluent
client (``SchemaRegistryClient({"url": ...})``) is given, ``http://<address>:<port>/apis/ccompat/v7``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import tarfile
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from sluice_dev.platform.common import (
    PlatformError,
    Started,
    alive_record,
    cache_dir,
    free_port,
    fresh_log,
    provision_maven_jars,
    single_artifact_pom,
    spawn,
    stop_pid,
    wait_until,
)
from sluice_dev.platform.kafka import find_java

COMPONENT = "registry"
#: Apicurio Registry's release (Apache-2.0): the 2.6.x line runs on Java 17 (3.x needs 21+)
VERSION = "2.6.13.Final"
GROUP_ID = "io.apicurio"
ARTIFACT_ID = "apicurio-registry-app"
CLASSIFIER = "all"
TARBALL = f"{ARTIFACT_ID}-{VERSION}-{CLASSIFIER}.tar.gz"
#: the runnable jar at the top of the unpacked tarball (a Quarkus legacy jar: ``lib/`` beside it)
RUNNER_JAR = f"{ARTIFACT_ID}-{VERSION}-runner.jar"
HOST = "127.0.0.1"
#: the Confluent-compatible API (2.6.x serves v6 and v7), relative to the server's root
CCOMPAT_PATH = "/apis/ccompat/v7"
#: the global compatibility rule, as Confluent Schema Registry's default
GLOBAL_COMPATIBILITY = "BACKWARD"
#: A bounded heap, C1 only and a serial collector, as for the broker and the object store.
JVM_OPTS = ("-Xmx256m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
READY_TIMEOUT = 90.0



# --- provisioning -------------------------------------------------------------------------------


def cache_path() -> Path:
    """``~/.cache/sluice/apicurio-<VERSION>/``."""
    return cache_dir("apicurio", VERSION)


def pom() -> str:
    return single_artifact_pom("registry", f"Apicurio Registry {VERSION}, its `all` distribution",
                               group=GROUP_ID, artifact=ARTIFACT_ID, version=VERSION, classifier=CLASSIFIER,
                               type_="tar.gz")


def provision(log: Callable[[str], object] = print) -> Path:
    """Resolve and unpack the distribution into the cache once; return its directory (``app``,
    holding :data:`RUNNER_JAR` and ``lib/``). Idempotent and locked against concurrent callers
    (:func:`common.provision_maven_jars`); the tarball is not kept once unpacked."""

    def unpack(staging: Path, log_path: Path) -> str:
        found = sorted(p.name for p in staging.iterdir()) if staging.is_dir() else []
        if found != [TARBALL]:
            raise PlatformError(COMPONENT, f"expected only {TARBALL} after resolution, got {found}", log_path)
        try:
            with tarfile.open(staging / TARBALL) as archive:
                archive.extractall(staging, filter="data")
        except (OSError, tarfile.TarError) as exc:
            raise PlatformError(COMPONENT, f"cannot unpack {TARBALL}: {exc}", log_path) from exc
        (staging / TARBALL).unlink()
        if not (staging / RUNNER_JAR).is_file():
            raise PlatformError(COMPONENT, f"{TARBALL} has no {RUNNER_JAR} at its top", log_path)
        return f"{VERSION}\n"

    return provision_maven_jars(COMPONENT, cache_path(), "app", pom(),
                                what=f"resolving Apicurio Registry {VERSION}", finish=unpack, log=log)


# --- the process --------------------------------------------------------------------------------


def url(address: str, port: int) -> str:
    """The base URL of the Confluent-compatible API (what a Confluent client is given)."""
    return f"http://{address}:{port}{CCOMPAT_PATH}"


def argv(java: str, app: Path, *, address: str, port: int, tmp: Path) -> list[str]:
    """The command line that starts the registry: in-memory storage (the distribution's H2
    database) with a small connection pool, the API (and ``/health``) on ``address:port``, the
    global compatibility rule :data:`GLOBAL_COMPATIBILITY`."""
    settings = {
        "java.io.tmpdir": str(tmp),
        "vertx.cacheDirBase": str(tmp / "vertx"),
        "quarkus.http.host": address,
        "quarkus.http.port": str(port),
        # the distribution's pool starts 20 connections (up to 100) to its in-memory database
        "quarkus.datasource.jdbc.initial-size": "2",
        "quarkus.datasource.jdbc.min-size": "2",
        "quarkus.datasource.jdbc.max-size": "10",
        # the rule applied to a subject without its own; :func:`start` also stores it, since 2.x's
        # Confluent-compatible ``GET /config`` reports only a stored rule (NONE otherwise)
        "registry.rules.global.compatibility": GLOBAL_COMPATIBILITY,
        # OpenAPI's date format in the v2 REST API (not the Confluent one): the legacy default logs
        # a 20-line warning at every start
        "registry.apis.v2.date-format": "yyyy-MM-dd'T'HH:mm:ss'Z'",
        # the distribution's own format has the week-based year (YYYY) and the caller's class
        # (often "null") rather than the logger's category
        "quarkus.log.console.format": "%d{yyyy-MM-dd HH:mm:ss,SSS} %p [%c{3.}] (%t) %m%n",
    }
    return [java, *JVM_OPTS, *(f"-D{key}={value}" for key, value in settings.items()),
            "-jar", str(app / RUNNER_JAR)]


def _paths(state_dir: Path) -> dict[str, Path]:
    base = state_dir / COMPONENT
    return {
        "base": base,
        "tmp": base / "tmp",
        "log": base / "registry.log",
        "pid": base / "registry.pid",
        "endpoint": base / "endpoint.json",
    }


def _request(base_url: str, method: str, path: str, body: object = None,
             timeout: float = 3.0) -> tuple[int, bytes]:
    parsed = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(parsed.netloc, timeout=timeout)
    headers = {"Accept": "application/vnd.schemaregistry.v1+json"}
    payload = None
    if body is not None:
        headers["Content-Type"] = "application/vnd.schemaregistry.v1+json"
        payload = json.dumps(body).encode()
    try:
        connection.request(method, parsed.path.rstrip("/") + path, body=payload, headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def answers(base_url: str) -> bool:
    """Does the Confluent-compatible API at ``base_url`` list its subjects?"""
    status, body = _request(base_url, "GET", "/subjects")
    return status == 200 and isinstance(json.loads(body), list)


def set_global_compatibility(base_url: str, level: str = GLOBAL_COMPATIBILITY,
                             log_path: Path | None = None) -> None:
    """Store the global compatibility rule through the Confluent-compatible API
    (``PUT /config``); PlatformError (naming ``log_path``) unless the registry takes it."""
    try:
        status, body = _request(base_url, "PUT", "/config", {"compatibility": level})
    except (OSError, http.client.HTTPException) as exc:
        raise PlatformError(COMPONENT, f"PUT {base_url}/config failed: {exc}", log_path) from exc
    if status != 200:
        raise PlatformError(COMPONENT, f"PUT {base_url}/config answered {status}: {body[:200]!r}",
                            log_path)


def _started(record: dict[str, str], paths: dict[str, Path], pid: int) -> Started:
    base_url = record["url"]
    return Started(
        COMPONENT,
        env={"SLUICE_SCHEMA_REGISTRY_URL": base_url},
        logs=[paths["log"]],
        info={
            "url": base_url, "version": VERSION, "pid": str(pid), "java": record["java"],
            "health": record["health"], "pod_address": record.get("pod_address", ""),
            "probe": urllib.parse.urlsplit(base_url).netloc,
        },
    )


def _running(state_dir: Path) -> Started | None:
    """The registry already started from ``state_dir``, if it is alive and answers."""
    paths = _paths(state_dir)
    found = alive_record(paths["pid"], paths["endpoint"], lambda record: answers(record["url"]))
    return _started(found[0], paths, found[1]) if found else None


def start(
    state_dir: Path, address: str = HOST, *, port: int | None = None, pod_address: str | None = None
) -> Started:
    """Start (or reuse) the registry for ``state_dir``; return once its Confluent-compatible API
    answers. It listens on ``address`` (loopback, or the real node's IP for pods), on ``port`` or
    a free one; ``pod_address``, when given, is the address (the platform's spelling for Kafka and
    the object store: the node IP, or None for loopback). Any failure (no java, a JVM that exits
    or never answers) raises PlatformError naming ``registry.log``."""
    state_dir = Path(state_dir).resolve()
    address = pod_address or address
    pod_address = "" if address == HOST else address
    if port is None:
        existing = _running(state_dir)
        if existing is not None and existing.info["pod_address"] == pod_address:
            return existing
    paths = _paths(state_dir)
    stop(state_dir)
    paths["base"].mkdir(parents=True, exist_ok=True)
    log_path = fresh_log(paths["log"])
    try:
        java = find_java()
    except PlatformError as exc:
        raise PlatformError(COMPONENT, str(exc).removeprefix("kafka: "), log_path) from exc
    app = provision()
    shutil.rmtree(paths["tmp"], ignore_errors=True)
    paths["tmp"].mkdir(parents=True)
    port = port if port is not None else free_port(address)
    base_url = url(address, port)
    proc = spawn(COMPONENT, argv(java, app, address=address, port=port, tmp=paths["tmp"]),
                 log_path=log_path, pid_path=paths["pid"], cwd=paths["base"])
    try:
        wait_until(COMPONENT, lambda: answers(base_url), timeout=READY_TIMEOUT, log_path=log_path,
                   proc=proc, what=f"answer on {base_url}/subjects")
        set_global_compatibility(base_url, log_path=log_path)
    except PlatformError:
        stop(state_dir)
        raise
    record = {"url": base_url, "java": java, "health": f"http://{address}:{port}/health/ready",
              "pod_address": pod_address}
    paths["endpoint"].write_text(json.dumps(record))
    return _started(record, paths, proc.pid)


def stop(state_dir: Path) -> None:
    """Stop the registry started from ``state_dir``, if any (idempotent); its schemas, in memory,
    go with it."""
    paths = _paths(Path(state_dir))
    stop_pid(paths["pid"], grace=15.0)
    with contextlib.suppress(FileNotFoundError):
        paths["endpoint"].unlink()
