"""Pod status from container states (pure): containerStatuses, phase, conditions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


def rfc3339(ts: float | None = None) -> str:
    when = dt.datetime.fromtimestamp(ts, dt.UTC) if ts is not None else dt.datetime.now(dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(ts: float | None = None) -> str:
    when = dt.datetime.fromtimestamp(ts, dt.UTC) if ts is not None else dt.datetime.now(dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class ContainerView:
    """What the pod status needs to know about one container."""

    name: str
    image: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    restart_count: int = 0
    last_terminated: Obj | None = None
    ready: bool = False
    started: bool = False
    container_id: str = ""


def terminated(
    exit_code: int,
    started_at: float | None,
    finished_at: float,
    reason: str | None = None,
    message: str = "",
    container_id: str = "",
) -> Obj:
    out: Obj = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "finishedAt": rfc3339(finished_at),
    }
    if started_at is not None:
        out["startedAt"] = rfc3339(started_at)
    if message:
        out["message"] = message
    if container_id:
        out["containerID"] = container_id
    return out


def container_status(view: ContainerView) -> Obj:
    if view.state == "running":
        state: Obj = {"running": {"startedAt": rfc3339(view.started_at)}}
    elif view.state == "terminated":
        state = {
            "terminated": terminated(
                view.exit_code or 0,
                view.started_at,
                view.finished_at or 0.0,
                view.reason or None,
                view.message,
                view.container_id,
            )
        }
    else:
        waiting: Obj = {"reason": view.reason}
        if view.message:
            waiting["message"] = view.message
        state = {"waiting": waiting}
    out: Obj = {
        "name": view.name,
        "image": view.image,
        "imageID": f"sluice-nodeagent://{view.image}",
        "state": state,
        "lastState": {"terminated": view.last_terminated} if view.last_terminated else {},
        "ready": view.ready,
        "restartCount": view.restart_count,
        "started": view.started,
    }
    if view.container_id:
        out["containerID"] = view.container_id
    return out


def _stopped(view: ContainerView) -> bool:
    return view.state == "terminated" or (view.state == "waiting" and view.last_terminated is not None)


def phase(restart_policy: str, init_done: bool, init_failed: bool, views: list[ContainerView]) -> str:
    """The kubelet's getPhase."""
    if init_failed:
        return "Failed"
    if not init_done:
        return "Pending"
    running = sum(v.state == "running" for v in views)
    waiting = sum(v.state == "waiting" and v.last_terminated is None for v in views)
    stopped = [v for v in views if _stopped(v)]
    succeeded = sum(
        (v.state == "terminated" and v.exit_code == 0)
        or (v.state == "waiting" and (v.last_terminated or {}).get("exitCode") == 0)
        for v in stopped
    )
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if restart_policy == "Always":
            return "Running"
        if succeeded == len(stopped):
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def conditions(
    previous: list[Obj], init_done: bool, views: list[ContainerView], phase_: str, now: float
) -> list[Obj]:
    """Pod conditions; ``lastTransitionTime`` kept while a condition's status is unchanged."""
    old = {c.get("type"): c for c in previous or []}
    all_ready = bool(views) and all(v.ready for v in views) and phase_ == "Running"
    wanted = {
        "PodReadyToStartContainers": True,
        "Initialized": init_done,
        "ContainersReady": all_ready,
        "Ready": all_ready,
    }
    out: list[Obj] = []
    for kind, ok in wanted.items():
        status = "True" if ok else "False"
        prev = old.get(kind)
        cond: Obj = {"type": kind, "status": status, "reason": None, "message": None}  # None clears
        cond["lastTransitionTime"] = (
            prev["lastTransitionTime"]
            if prev and prev.get("status") == status and prev.get("lastTransitionTime")
            else rfc3339(now)
        )
        if not ok and kind in ("ContainersReady", "Ready"):
            not_ready = [v.name for v in views if not v.ready]
            if not_ready:
                cond["reason"] = "ContainersNotReady"
                cond["message"] = f"containers with unready status: [{' '.join(not_ready)}]"
            elif phase_ in ("Succeeded", "Failed"):
                cond["reason"] = "PodCompleted"
        out.append(cond)
    if "PodScheduled" in old:
        out.append(old["PodScheduled"])
    return out


def pod_status(
    *,
    restart_policy: str,
    init_done: bool,
    init_failed: bool,
    views: list[ContainerView],
    init_views: list[ContainerView],
    previous: list[Obj],
    ip: str,
    start_time: str | None,
    final: bool,
    now: float,
) -> Obj:
    """The pod's ``status``; ``final`` once its containers were stopped for deletion."""
    if final:
        for v in views:
            if v.state != "terminated":
                v.exit_code = 137 if v.exit_code is None else v.exit_code
                v.state, v.reason = "terminated", "Completed" if v.exit_code == 0 else "Error"
                v.finished_at = v.finished_at or now
            v.ready = v.started = False
        phase_ = "Succeeded" if all(v.exit_code == 0 for v in views) else "Failed"
    else:
        phase_ = phase(restart_policy, init_done, init_failed, views)
    body: Obj = {
        "phase": phase_,
        "conditions": conditions(previous, init_done, views, phase_, now),
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": start_time,
        "containerStatuses": [container_status(v) for v in views],
    }
    if init_views:
        body["initContainerStatuses"] = [container_status(v) for v in init_views]
    return body
