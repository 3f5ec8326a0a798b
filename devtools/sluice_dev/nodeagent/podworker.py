"""One thread per pod: volumes, init containers, containers, probes, status, termination."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_dev.nodeagent import envres, sandbox, status
from sluice_dev.nodeagent.backoff import Backoff
from sluice_dev.nodeagent.containers import Container
from sluice_dev.nodeagent.images import Catalog, ImageError, argv_for
from sluice_dev.nodeagent.ipam import Allocator
from sluice_dev.nodeagent.kubeapi import Api, ApiError
from sluice_dev.nodeagent.probes import LIVENESS, READINESS, STARTUP, exec_in, run_probe
from sluice_dev.nodeagent.volumes import VolumeNotReady, Volumes, write_atomic

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TICK = 0.2


@dataclass
class NodeContext:
    """What every pod worker shares."""

    api: Api
    node_name: str
    state_dir: Path
    allocator: Allocator
    catalog: Catalog
    backoff: Backoff
    use_namespace: bool
    allocatable: dict[str, str] = field(default_factory=dict)
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    def pod_dir(self, uid: str) -> Path:
        return self.state_dir / "pods" / uid


class PodWorker(threading.Thread):
    def __init__(self, ctx: NodeContext, pod: Obj) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.ctx = ctx
        self.pod = pod
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.dir = ctx.pod_dir(self.uid)
        self.gone = False  # the object was removed from the API
        self.wake = threading.Event()
        self.done = threading.Event()
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        previous = {c["name"]: c for c in (pod.get("status", {}).get("containerStatuses") or [])}
        prev_init = {c["name"]: c for c in (pod.get("status", {}).get("initContainerStatuses") or [])}
        self.containers = [self._restore(c, previous.get(c["name"])) for c in spec["containers"]]
        self.init_containers = [
            self._restore(c, prev_init.get(c["name"])) for c in spec.get("initContainers") or []
        ]
        self.init_done = not self.init_containers or (
            all((s.get("state", {}).get("terminated") or {}).get("exitCode") == 0 for s in prev_init.values())
            and len(prev_init) == len(self.init_containers)
        )
        self.init_failed = False
        self.ip = "127.0.0.1" if spec.get("hostNetwork") else ""
        self.volumes: Volumes | None = None
        self.volume_error = ""
        self.start_time = pod.get("status", {}).get("startTime")
        self.published: str | None = None
        self.terminal = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")

    @staticmethod
    def _restore(spec: Obj, previous: Obj | None) -> Container:
        """Keep restartCount/lastState of a pod the agent ran before its own restart."""
        if not previous:
            return Container(spec)
        count = int(previous.get("restartCount", 0))
        last = (previous.get("lastState") or {}).get("terminated")
        running = (previous.get("state") or {}).get("running")
        if running:  # the agent restarted under a running container: it was killed
            count += 1
            last = status.terminated(137, None, time.time(), "Error", "killed: node agent restarted")
        container = Container(spec, restart_count=count, last_terminated=last)
        done = (previous.get("state") or {}).get("terminated")
        if done:  # finished before the agent restarted: keep it finished
            container.state, container.exit_code = "terminated", int(done.get("exitCode", 0))
            container.reason, container.message = done.get("reason", ""), done.get("message", "")
            container.started_at = container.finished_at = time.time()
            container.ever_started = True
        return container

    # -- events from the agent -----------------------------------------------------------------

    def update(self, pod: Obj) -> None:
        self.pod = pod
        self.wake.set()

    def deleted(self) -> None:
        self.gone = True
        self.wake.set()

    @property
    def terminating(self) -> bool:
        return self.gone or bool(self.pod["metadata"].get("deletionTimestamp"))

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod %s/%s: worker failed", self.ns, self.pod_name)
            self._kill_all(0)
        finally:
            self.done.set()

    def _run(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "pod.json").write_text(
            json.dumps({"namespace": self.ns, "name": self.pod_name, "uid": self.uid})
        )
        if self.terminal:  # finished before an agent restart: only wait for deletion
            while not self.terminating:
                self.wake.wait(1.0)
                self.wake.clear()
            self._finish()
            return
        if not self.ip:
            self.ip = self.ctx.allocator.allocate(self.uid)
        if not self.start_time:
            self.start_time = status.rfc3339()
        (self.dir / "etc-hosts").write_text(sandbox.hosts_file(self.pod, self.ip))
        for c in self.containers:
            if c.state == "terminated":
                self._exited(c)  # restored finished container: restart if the policy says so
        while not self.terminating:
            try:
                self._step()
                self._publish()
            except Exception:  # keep the pod handled (deletion above all) whatever happens
                log.exception("pod %s/%s: step failed", self.ns, self.pod_name)
                self.wake.wait(1.0)
            self.wake.wait(TICK)
            self.wake.clear()
        self._finish()

    def _finish(self) -> None:
        spec, meta = self.pod["spec"], self.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        self._kill_all(float(grace or 0), reason="pod deleted")
        if not self.gone:
            if not self.terminal:
                try:
                    self._publish(final=True)
                except Exception:
                    log.exception("pod %s/%s: final status failed", self.ns, self.pod_name)
            try:
                self.ctx.api.delete(
                    f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}",
                    {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
                )
            except ApiError as exc:
                if exc.status != 409:  # 409: uid precondition failed, a newer pod of that name
                    log.warning("pod %s/%s: delete failed: %s", self.ns, self.pod_name, exc)
        self.cleanup()

    def cleanup(self) -> None:
        self.ctx.allocator.release(self.uid)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_all(self, grace: float, reason: str = "") -> None:
        running = [c for c in self.init_containers + self.containers if c.alive()]
        threads = [threading.Thread(target=c.kill, args=(grace, reason)) for c in running]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for c in self.init_containers + self.containers:
            c.poll()

    # -- one step ------------------------------------------------------------------------------

    def _step(self) -> None:
        if self.volumes is None:
            self.volumes = Volumes(self.ctx.api, self.pod, self.dir, self.ip, self.ctx.allocatable)
        try:
            self.volumes.setup()
            self.volume_error = ""
            self.volumes.refresh()
        except (VolumeNotReady, ApiError) as exc:
            if self.volume_error != str(exc):
                log.info("pod %s/%s: volumes not ready: %s", self.ns, self.pod_name, exc)
            self.volume_error = str(exc)
            for c in self.containers + self.init_containers:
                if not c.ever_started:
                    c.message = str(exc)
            return
        if self.terminal:
            return
        if not self.init_done:
            self._step_init()
            return
        for c in self.containers:
            self._step_container(c)
        if all(c.state == "terminated" for c in self.containers):
            self.terminal = True

    def _step_init(self) -> None:
        for c in self.init_containers:
            if c.state == "terminated" and c.exit_code == 0:
                continue
            if c.state == "running":
                if c.poll():
                    if c.exit_code == 0:
                        continue
                    if self.restart_policy == "Never":
                        self.init_failed = True
                        self.terminal = True
                        return
                    c.schedule_restart(self.ctx.backoff)
                return
            if c.state == "waiting" and time.time() >= c.not_before:
                self._start(c)
            return
        self.init_done = True

    def _step_container(self, c: Container) -> None:
        now = time.time()
        if c.state == "waiting" and now >= c.not_before:
            self._start(c)
            return
        if c.state != "running":
            return
        if c.poll():
            self._exited(c)
            return
        self._probe(c, now)

    def _exited(self, c: Container) -> None:
        policy = self.restart_policy
        if policy == "Always" or (policy == "OnFailure" and c.exit_code != 0):
            log.info(
                "pod %s/%s: container %s exited with %s; restarting",
                self.ns,
                self.pod_name,
                c.name,
                c.exit_code,
            )
            c.schedule_restart(self.ctx.backoff)

    def _probe(self, c: Container, now: float) -> None:
        startup = c.probes.get(STARTUP)
        kinds = [STARTUP] if startup is not None and not startup.result else [LIVENESS, READINESS]
        for kind in kinds:
            probe = c.probes.get(kind)
            if probe is None or not probe.due(now):
                continue
            runner = exec_in(c.pid, c.env, self.ctx.use_namespace)
            ok, message = run_probe(probe.spec, c.spec, self.ip, runner)
            probe.record(ok, time.time(), message)
            if kind in (LIVENESS, STARTUP) and not ok and probe.failed:
                reason = f"{kind} probe failed: {message}"
                log.info("pod %s/%s: container %s %s; killing", self.ns, self.pod_name, c.name, reason)
                grace = float(
                    probe.spec.get("terminationGracePeriodSeconds")
                    or self.pod["spec"].get("terminationGracePeriodSeconds", 30)
                )
                c.kill(grace, reason)
                if c.poll():
                    self._exited(c)
                return

    # -- starting a container ------------------------------------------------------------------

    def _lookup(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        plural = "configmaps" if kind == "configmap" else "secrets"
        obj = self.ctx.api.get_or_none(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
        if obj is None:
            return None
        if kind == "secret":
            return envres.decode_secret(obj)
        return dict(obj.get("data") or {})

    def _write_hosts(self) -> None:
        """Refresh the pod's /etc/hosts (services resolve to pod IPs) before a container starts."""
        try:
            services = self.ctx.api.get("/api/v1/services").get("items", [])
            pods = self.ctx.api.get("/api/v1/pods").get("items", [])
            extra = sandbox.service_hosts(self.ns, services, pods)
        except ApiError as exc:
            log.warning("pod %s/%s: cannot list services for /etc/hosts: %s", self.ns, self.pod_name, exc)
            extra = []
        write_atomic(self.dir / "etc-hosts", sandbox.hosts_file(self.pod, self.ip, extra).encode(), 0o644)

    def _start(self, c: Container) -> None:
        assert self.volumes is not None
        spec = c.spec
        image = self.ctx.catalog.find(spec.get("image", ""))
        hostname = self.pod["spec"].get("hostname") or self.pod_name
        base = self.ctx.catalog.base_env(self.ctx.environ)
        base.update(image.env if image else {})
        base.update(sandbox.in_cluster_env(hostname, self.ctx.api.port))
        try:
            env = envres.resolve(
                self.pod,
                spec,
                pod_ip=self.ip,
                lookup=self._lookup,
                base=base,
                allocatable=self.ctx.allocatable,
            )
            expanded = dict(
                spec,
                command=envres.expand_argv(spec.get("command") or [], env),
                args=envres.expand_argv(spec.get("args") or [], env),
            )
            argv = argv_for(expanded, image)
            mounts = self.volumes.mounts_for(spec)
        except (envres.EnvError, ApiError) as exc:
            c.reason, c.message, c.not_before = "CreateContainerConfigError", str(exc), time.time() + 2
            return
        except ImageError as exc:
            c.reason, c.message, c.not_before = "ErrImagePull", str(exc), time.time() + 5
            return
        except VolumeNotReady as exc:
            c.reason, c.message, c.not_before = "ContainerCreating", str(exc), time.time() + 1
            return
        if self.ctx.use_namespace and not self.pod["spec"].get("hostNetwork"):
            self._write_hosts()
            mounts.append({"src": str(self.dir / "etc-hosts"), "dst": "/etc/hosts", "readOnly": True})
        elif not self.ctx.use_namespace:
            env["SLUICE_VOLUME_MOUNTS"] = json.dumps({m["dst"]: m["src"] for m in mounts})
            sandbox.symlink_fallback(mounts)
        cwd = spec.get("workingDir") or (image.working_dir if image else None) or "/"
        c.start(
            argv,
            env,
            mounts,
            cwd,
            self.dir / "run",
            self.dir / "logs" / f"{c.name}.log",
            self.ctx.use_namespace,
            hostname=hostname,
        )
        log.info(
            "pod %s/%s: started container %s (pid %s, ip %s)", self.ns, self.pod_name, c.name, c.pid, self.ip
        )

    # -- status --------------------------------------------------------------------------------

    def _publish(self, final: bool = False) -> None:
        image = {c["name"]: c.get("image", "") for c in self.pod["spec"]["containers"]}
        image.update({c["name"]: c.get("image", "") for c in self.pod["spec"].get("initContainers") or []})
        views = [c.view(image[c.name]) for c in self.containers]
        init_views = [c.view(image[c.name]) for c in self.init_containers]
        body = status.pod_status(
            restart_policy=self.restart_policy,
            init_done=self.init_done,
            init_failed=self.init_failed,
            views=views,
            init_views=init_views,
            previous=self.pod.get("status", {}).get("conditions") or [],
            ip=self.ip,
            start_time=self.start_time,
            final=final,
            now=time.time(),
        )
        comparable = json.dumps(body, sort_keys=True)
        if comparable == self.published:
            return
        try:
            result = self.ctx.api.patch(
                f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}/status",
                {"metadata": {"uid": self.uid}, "status": body},
                strategic=True,
            )
            self.published = comparable
            if result.get("metadata", {}).get("uid") == self.uid:
                self.pod = result
        except ApiError as exc:
            if exc.status == 404:
                self.gone = True
            else:
                log.warning("pod %s/%s: status update failed: %s", self.ns, self.pod_name, exc)
