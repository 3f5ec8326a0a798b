"""A real Prometheus server, for the end-to-end test of the chart's alert rules.

The ``prometheus`` binary comes from Debian's ``prometheus`` package, the one that ships
``promtool`` (:mod:`sluice_dev.platform.promtool`), installed the same way when it is missing
(:func:`sluice_dev.platform.debian.ensure_tool`; the package's own service is not used).
:func:`start` runs a server of our own in a directory: its configuration and rule files written
there, its TSDB under ``data/``, its log in ``prometheus.log``, listening on 127.0.0.1 on a free
port. It fails loudly (``PlatformError`` with the log's tail) when the server does not come up.
:class:`Server` reads the HTTP API (``/api/v1/query``, ``/api/v1/alerts``, ``/api/v1/targets``).
Debian builds it without the Kubernetes service discovery (``kubernetes_sd_configs`` is an unknown
field there): targets come from ``file_sd_configs`` files that the caller keeps current
(:func:`write_targets`).
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_dev.platform.common import PlatformError, free_port, spawn, stop_pid, tail, wait_until
from sluice_dev.platform.debian import ensure_tool, find_tool
from sluice_dev.platform.promtool import find_promtool

COMPONENT = "prometheus"
PACKAGE = "prometheus"
PROMETHEUS = Path("/usr/bin/prometheus")
START_TIMEOUT = 60.0
#: attempts at a free port (another process may take the one chosen before the server binds it)
PORT_ATTEMPTS = 3


def find_prometheus() -> Path | None:
    """``/usr/bin/prometheus``, else a ``prometheus`` on PATH, else None."""
    return find_tool(PROMETHEUS, "prometheus")


def ensure_prometheus(log: Callable[[str], object] = print) -> Path:
    """The path of ``prometheus``, installed with apt-get (package ``prometheus``) when missing."""
    return ensure_tool(COMPONENT, PACKAGE, "prometheus", find_prometheus, log)


@dataclass
class Server:
    """A running Prometheus server and its HTTP API."""

    url: str
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def log_path(self) -> Path:
        return self.directory / "prometheus.log"

    def api(self, path: str, **params: str) -> Any:
        """``data`` of ``GET /api/v1/<path>?params``; raises when the status is not ``success``."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus /api/v1/{path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        data = self.api("query", query=expr)
        if data.get("resultType") != "vector":
            raise RuntimeError(f"prometheus: {expr!r} is a {data.get('resultType')}, not a vector")
        return list(data["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Every pending or firing alert: ``labels``, ``annotations``, ``state``, ``activeAt``."""
        return list(self.api("alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with their ``labels``, ``health`` and ``lastError``."""
        return list(self.api("targets", state="active")["activeTargets"])

    def ready(self) -> bool:
        """Whether it answers ``/-/ready`` with 200 (raises while it does not listen yet)."""
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)

    def stop(self) -> None:
        stop_pid(self.directory / "prometheus.pid")


def write_targets(path: Path, groups: list[dict[str, Any]]) -> None:
    """A ``file_sd_configs`` file: target groups (``targets``: ``host:port`` strings, ``labels``),
    replaced at once (Prometheus watches the file and must never read half of it). Debian's
    ``prometheus`` is built without the Kubernetes service discovery: a test lists the pods
    itself and writes them here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(json.dumps(groups, indent=1, sort_keys=True))
    partial.replace(path)


def write_config(directory: Path, config: Mapping[str, Any], rules: Mapping[str, Mapping[str, Any]]) -> Path:
    """``prometheus.yml`` in ``directory`` with ``config`` and ``rule_files`` naming ``rules`` (file
    name -> rules file content), written beside it. Returns the configuration's path."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in rules.items():
        (directory / name).write_text(yaml.safe_dump(dict(content), sort_keys=False))
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump({**config, "rule_files": sorted(rules)}, sort_keys=False))
    return path


def start(directory: Path, config: Mapping[str, Any], rules: Mapping[str, Mapping[str, Any]],
          binary: Path | None = None) -> Server:
    """A Prometheus server with ``config`` (``global``, ``scrape_configs``; ``rule_files`` is
    made from ``rules``) in ``directory``, on 127.0.0.1 and a free port, once it answers
    ``/-/ready``. Raises ``PlatformError`` with its log's tail when it does not."""
    prometheus = binary or ensure_prometheus()
    config_path = write_config(directory, config, rules)
    log_path = directory / "prometheus.log"
    promtool = find_promtool()  # the same package: there unless the binary came from elsewhere
    if promtool is not None:
        check = subprocess.run([str(promtool), "check", "config", str(config_path)], capture_output=True,
                               text=True, check=False, timeout=60)
        if check.returncode != 0:
            raise PlatformError(COMPONENT, f"promtool check config {config_path} failed:\n"
                                f"{check.stdout}{check.stderr}")
    last: PlatformError | None = None
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = spawn(COMPONENT, [
            str(prometheus), f"--config.file={config_path}", f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d", "--log.level=info",
        ], log_path=log_path, pid_path=directory / "prometheus.pid", cwd=directory)
        server = Server(url, directory, proc)
        try:
            wait_until(COMPONENT, server.ready, timeout=START_TIMEOUT, log_path=log_path, proc=proc,
                       what=f"answer {url}/-/ready")
            return server
        except PlatformError as exc:
            server.stop()
            last = exc
            if "address already in use" not in tail(log_path, 5):
                break
    assert last is not None
    raise last

