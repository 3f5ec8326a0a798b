"""The driver's Lease through an API server outage, on a real API server.

Each driver reaches the API server through a loopback proxy the test cuts (open connections
closed, new ones refused, as against a stopped API server) and restores later:

* a holder with an exactly-once output (``ride_out``) writes on while the API server is away and
  keeps its term when it is back; with an at-least-once output it stops once its lease could have
  expired (the write guard), as before;
* a standby cut off as long does not take the Lease from a holder that renews as soon as the API
  server is back (its record's age counts again from when it sees it);
* a holder cut off alone (a partition) is taken over on expiry; it learns so as soon as it reaches
  the API server again and stops. While cut off it went on writing: its output is guarded by Kafka's
  transactional fence (``tests/integration/test_runtime_streaming.py``, the zombie fencing), its
  checkpoint by the epochs.

The API server stopped for 60 s under load, end to end: ``tests/e2e/test_standby.py``.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sluice_runtime.elector import Elector
from sluice_runtime.kubeapi import KubeApi, KubeConfig

from tests.support.kubetoken import ca_file
from tests.support.tcpproxy import CuttableProxy

pytestmark = pytest.mark.integration

LEASE = "q-driver"
DURATION = 5.0


def kubectl(kube: Any, namespace: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run([str(kube.bin_dir / "kubectl"), *args, "-n", namespace], input=stdin,
                            capture_output=True, text=True, env=kube.env(), timeout=60, check=False)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture
def api_config(kube: Any, namespace: str, tmp_path: Path) -> KubeConfig:
    """A driver's client configuration: a service account with the rights on Leases a driver has."""
    for obj in (
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "driver"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "driver"},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "driver"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "driver"},
         "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": namespace}]},
    ):
        kubectl(kube, namespace, "apply", "-f", "-", stdin=json.dumps(obj))
    token = tmp_path / "token"
    token.write_text(kubectl(kube, namespace, "create", "token", "driver", "--duration", "1h").strip())
    return KubeConfig(server=kube.server, token_file=str(token), ca_file=str(ca_file(kube, tmp_path)))


class Driver:
    """One driver's election, reaching the API server through a proxy the test can cut."""

    def __init__(self, config: KubeConfig, namespace: str, pod: str, *, ride_out: bool) -> None:
        url = urllib.parse.urlsplit(config.server)
        self.proxy = CuttableProxy(url.hostname or "127.0.0.1", url.port or 443)
        proxied = KubeConfig(server=f"https://{url.hostname}:{self.proxy.port}", token_file=config.token_file,
                             ca_file=config.ca_file)
        self.elector = Elector(KubeApi(proxied), namespace=namespace, name=LEASE, identity=f"{pod}/1",
                               address=None, plan_hash="p", duration=DURATION, ride_out=ride_out)

    def cut_off(self) -> None:
        self.proxy.cut()

    def reconnect(self) -> None:
        self.proxy.restore()

    def lead(self, timeout: float = 30.0) -> None:
        stop = _deadline_event(timeout)
        assert self.elector.wait_for_leadership(stop, poll=0.1) is not None, "no leadership"


def _deadline_event(timeout: float) -> Any:
    """An event-like stop flag that turns true after ``timeout`` seconds."""
    end = time.monotonic() + timeout

    class Deadline:
        def is_set(self) -> bool:
            return time.monotonic() > end

        def wait(self, seconds: float) -> bool:
            time.sleep(min(seconds, max(0.0, end - time.monotonic())))
            return self.is_set()

    return Deadline()


@pytest.fixture
def drivers(api_config: KubeConfig, namespace: str) -> Iterator[Callable[..., Driver]]:
    made: list[Driver] = []

    def make(pod: str, *, ride_out: bool) -> Driver:
        driver = Driver(api_config, namespace, pod, ride_out=ride_out)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.elector.close()
        driver.proxy.close()


def watch_guard(driver: Driver, seconds: float) -> list[str | None]:
    """The write guard's answers, every 0.2 s for ``seconds``."""
    answers: list[str | None] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        answers.append(driver.elector.may_write())
        time.sleep(0.2)
    return answers


def test_an_exactly_once_holder_writes_on_through_an_outage_and_keeps_its_term(
        drivers: Callable[..., Driver]) -> None:
    from sluice_runtime.metrics import RuntimeMetrics

    holder = drivers("a", ride_out=True)
    holder.lead()
    metrics = RuntimeMetrics()  # wired as the driver wires it
    metrics.api_away.set_function(lambda: holder.elector.api_away_seconds)
    holder.cut_off()
    answers = watch_guard(holder, 3 * DURATION)
    assert answers and all(a is None for a in answers), answers
    assert not holder.elector.lost.is_set()
    away = metrics.registry.get_sample_value("sluice_lease_api_away_seconds")
    assert away is not None and away > 2 * DURATION
    holder.reconnect()
    deadline = time.monotonic() + 2 * DURATION
    while holder.elector.api_away_seconds > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert holder.elector.api_away_seconds == 0, "no renewal once the API server was back"
    assert metrics.registry.get_sample_value("sluice_lease_api_away_seconds") == 0
    assert holder.elector.may_write() is None and not holder.elector.lost.is_set()
    record = holder.elector.record()
    assert record is not None and record.holder == "a/1"


def test_an_at_least_once_holder_stops_writing_before_its_lease_could_expire(
        drivers: Callable[..., Driver]) -> None:
    holder = drivers("a", ride_out=False)
    holder.lead()
    holder.cut_off()
    cut = time.monotonic()
    while holder.elector.may_write() is None and time.monotonic() - cut < 2 * DURATION:
        time.sleep(0.1)
    stopped_after = time.monotonic() - cut
    assert holder.elector.may_write() is not None
    assert stopped_after < DURATION, f"still writing {stopped_after:.1f}s after the last renewal"
    assert holder.elector.lost.wait(DURATION), "the term did not end"


def test_a_standby_cut_off_as_long_leaves_the_lease_to_a_holder_that_renews_when_it_is_back(
        drivers: Callable[..., Driver]) -> None:
    holder = drivers("a", ride_out=True)
    holder.lead()
    standby = drivers("b", ride_out=True)
    stop = _deadline_event(6 * DURATION)
    result: list[Any] = []
    waiting = threading.Thread(
        target=lambda: result.append(standby.elector.wait_for_leadership(stop, poll=0.1)))
    waiting.start()
    time.sleep(1.0)
    holder.cut_off()
    standby.cut_off()
    time.sleep(2 * DURATION)  # the API server "away" for longer than the lease
    # the standby is back first: the record it sees is older than the lease, but it saw nothing for
    # a while; the holder, back 2.5 s later, renews within a fifth of the lease
    standby.reconnect()
    time.sleep(DURATION / 2)
    holder.reconnect()
    waiting.join()
    assert result == [None], "the standby took the Lease from a live holder after the outage"
    assert holder.elector.may_write() is None and not holder.elector.lost.is_set()


def test_a_holder_cut_off_alone_is_taken_over_and_stops_once_it_hears_so(
        drivers: Callable[..., Driver]) -> None:
    holder = drivers("a", ride_out=True)
    holder.lead()
    holder.cut_off()
    standby = drivers("b", ride_out=True)
    standby.lead(timeout=4 * DURATION)  # on expiry: the holder renews nothing it cannot reach
    # cut off, the former holder cannot know: it writes on, fenced by Kafka (see the docstring)
    assert holder.elector.may_write() is None
    holder.reconnect()
    assert holder.elector.lost.wait(3 * DURATION), "the former holder never learnt it lost the Lease"
    assert holder.elector.may_write() is not None
    assert standby.elector.may_write() is None
