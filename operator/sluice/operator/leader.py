"""Lease-based leader election (coordination.k8s.io/v1), so two operator replicas are safe.

Only the holder of the Lease runs kopf. The holder renews every ``renew_seconds``; a replica
takes over when the Lease has not been renewed for ``lease_seconds``. All writes use the Lease's
``resourceVersion`` (optimistic concurrency), so two candidates never both win.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass

from sluice.operator.kube import Kube, KubeError

log = logging.getLogger("sluice.operator.leader")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _fmt(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    return dt.datetime.fromisoformat(text)


@dataclass
class LeaderElector:
    kube: Kube
    namespace: str
    name: str
    identity: str
    lease_seconds: int = 15
    renew_seconds: float = 5.0

    def try_acquire(self) -> bool:
        """One attempt to become (or stay) the leader."""
        now = _now()
        try:
            lease = self.kube.get("Lease", self.namespace, self.name)
            if lease is None:
                self.kube.create({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {
                        "holderIdentity": self.identity,
                        "leaseDurationSeconds": self.lease_seconds,
                        "acquireTime": _fmt(now),
                        "renewTime": _fmt(now),
                        "leaseTransitions": 0,
                    },
                })
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            renewed = _parse(spec.get("renewTime"))
            duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
            expired = renewed is None or renewed + dt.timedelta(seconds=duration) < now
            if holder not in (None, "", self.identity) and not expired:
                return False
            new_spec = dict(spec)
            if holder != self.identity:
                new_spec["acquireTime"] = _fmt(now)
                new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            new_spec.update(holderIdentity=self.identity, renewTime=_fmt(now),
                            leaseDurationSeconds=self.lease_seconds)
            lease["spec"] = new_spec
            self.kube.replace(lease)  # carries resourceVersion: 409 if someone else moved first
            return True
        except KubeError as exc:
            if exc.status == 409:
                return False
            log.warning("leader election: %s", exc)
            return False

    def release(self) -> None:
        try:
            lease = self.kube.get("Lease", self.namespace, self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = _fmt(_now() - dt.timedelta(days=1))
                self.kube.replace(lease)
        except KubeError as exc:
            log.warning("leader election: cannot release the lease: %s", exc)

    def wait_for_leadership(self, stop: threading.Event) -> bool:
        announced = False
        while not stop.is_set():
            if self.try_acquire():
                log.info("leader election: %s leads (lease %s/%s)", self.identity, self.namespace, self.name)
                return True
            if not announced:
                log.info("leader election: waiting for leadership of lease %s/%s", self.namespace, self.name)
                announced = True
            stop.wait(self.renew_seconds)
        return False

    def keep_renewing(self, stop: threading.Event, lost: threading.Event) -> None:
        """Renew until ``stop``; set ``lost`` when the lease could not be renewed in time."""
        last_ok = _now()
        while not stop.wait(self.renew_seconds):
            if self.try_acquire():
                last_ok = _now()
            elif (_now() - last_ok).total_seconds() > self.lease_seconds * 0.8:
                log.error("leader election: lost the lease; stopping")
                lost.set()
                return


#: the label the leading replica puts on its own pod: the chart's webhook Service selects it, since
#: only the leader runs kopf and so serves the admission webhook
LEADER_LABEL = "sluice.dev/leader"


def mark_pod(kube: Kube, namespace: str | None, pod: str | None, leader: bool) -> None:
    """Label the operator's own pod as the leader (or take the label off: a restarted container
    keeps its pod's labels). Nothing outside a pod (no ``POD_NAME``)."""
    if not namespace or not pod:
        return
    try:
        labels = {LEADER_LABEL: "true" if leader else None}
        kube.patch("Pod", namespace, pod, {"metadata": {"labels": labels}})
    except KubeError as exc:
        log.warning("leader election: cannot label pod %s/%s: %s", namespace, pod, exc)
