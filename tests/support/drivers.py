"""The drivers' side of the operator protocol, written the way ``sluice_runtime`` writes it: the
holder's Lease records (takeover, plan, progress) and a driver pod's error annotation.

For tests of the operator without a kubelet (pods stay Pending); the end-to-end tests run the real
runtime in pods.
"""

from __future__ import annotations

from typing import Any

from sluice.core.cleanup import CLEANUP_DONE, pending_cleanup
from sluice.core.driverreport import DRIVER_ERROR, HOLDER_PROGRESS, DriverError, Progress
from sluice.core.election import HOLDER_ENGINE, HOLDER_PLAN, LAST_TAKEOVER, Takeover
from sluice.operator.kube import Kube

from tests.support.waiting import eventually

T_ERROR = "2026-01-01T00:00:01Z"


class DriverSide:
    """Writes what the query's drivers write: the holder's Lease records and a pod's error."""

    def __init__(self, api: Any, namespace: str, name: str = "totals", role: str = "driver") -> None:
        self.ns, self.name, self.role = namespace, name, role  # role: driver, or backfill (its own Lease)
        self.k = Kube(api)  # the drivers' own client: not the operator's (nor its injected faults)

    def lease(self) -> dict[str, Any]:
        lease = self.k.get("Lease", self.ns, f"{self.name}-{self.role}")
        assert lease is not None
        return lease

    def take_over(self, plan_hash: str, batches: int = 0, gap: float | None = 0.8,
                  lag: int | None = None, engine: str = "") -> int:
        """A driver of ``plan_hash`` (on ``engine``: the digest in its SLUICE_ENGINE) takes over."""
        lease = self.lease()
        spec = lease["spec"]
        epoch = int(spec.get("leaseTransitions") or 0) + 1
        takeover = Takeover(time="2026-01-01T00:00:02Z", from_pod=f"{self.name}-driver-old",
                            to_pod=f"{self.name}-driver-new", reason="released", epoch=epoch,
                            gap_seconds=gap, plan_hash=plan_hash, engine=engine)
        spec.update(holderIdentity=f"{self.name}-driver-new/{epoch}", leaseTransitions=epoch,
                    acquireTime="2026-01-01T00:00:02.000000Z", renewTime="2026-01-01T00:00:02.000000Z")
        ann = lease["metadata"].setdefault("annotations", {})
        progress = Progress(plan_hash, epoch, batches, batches, lag_records=lag, engine=engine)
        ann.update({HOLDER_PLAN: plan_hash, HOLDER_ENGINE: engine, LAST_TAKEOVER: takeover.to_json(),
                    HOLDER_PROGRESS: progress.to_json()})
        self.k.replace(lease)
        return epoch

    def progress(self, batches: int, lag: int | None = None) -> None:
        lease = self.lease()
        ann = lease["metadata"]["annotations"]
        old = Progress.from_json(ann[HOLDER_PROGRESS])
        assert old is not None
        ann[HOLDER_PROGRESS] = Progress(old.plan_hash, old.epoch, batches, batches, lag_records=lag,
                                        engine=old.engine).to_json()
        self.k.replace(lease)

    def clean_up(self) -> tuple[str, ...]:
        """The holder carries out the operator's clean-up request (``sluice_runtime.cleanup``):
        answers it on the Lease; returns the paths it was asked to remove."""
        lease = self.lease()
        ann = lease["metadata"].setdefault("annotations", {})
        request = pending_cleanup(ann)
        assert request is not None, "no clean-up request on the Lease"
        ann[CLEANUP_DONE] = request.id
        self.k.replace(lease)
        return request.paths

    def fail(self, plan_hash: str, message: str, time: str = T_ERROR, engine: str = "",
             error_class: str = "CAST_INVALID_INPUT") -> None:
        """The driver pod of ``plan_hash`` (on ``engine``) reports that its query terminated with an
        exception."""
        def pod() -> dict[str, Any] | None:
            selector = (f"sluice.dev/query={self.name},sluice.dev/plan-hash={plan_hash[:12]},"
                        f"app.kubernetes.io/component={self.role}"
                        + (f",sluice.dev/engine={engine[:12]}" if engine else ""))
            pods = self.k.list("Pod", self.ns, selector)
            return pods[0] if pods else None

        target = eventually(pod, timeout=60, what=f"a driver pod of plan {plan_hash[:12]}")
        error = DriverError(plan_hash, "active", error_class, message, time, step="project-1", engine=engine)
        self.k.patch("Pod", self.ns, target["metadata"]["name"],
                       {"metadata": {"annotations": {DRIVER_ERROR: error.to_json()}}})
