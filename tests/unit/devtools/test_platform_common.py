"""Pure parts of the platform plumbing: env file, errors, process helpers."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sluice_dev.platform import common, orchestrate


def test_env_file_exports_and_prepends_path(tmp_path: Path) -> None:
    path = orchestrate.write_env(
        tmp_path, {"KUBECONFIG": "/x y/admin.kubeconfig", "SLUICE_KAFKA_BOOTSTRAP": "127.0.0.1:9"}, ["/b"]
    )
    script = f"source {path}; echo \"$KUBECONFIG|$SLUICE_KAFKA_BOOTSTRAP|${{PATH%%:*}}\""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "/x y/admin.kubeconfig|127.0.0.1:9|/b"


def test_platform_error_names_component_and_log(tmp_path: Path) -> None:
    err = common.PlatformError("kafka", "port busy", tmp_path / "kafka.log")
    assert str(err).startswith("kafka: port busy")
    assert str(tmp_path / "kafka.log") in str(err)


def test_wait_until_reports_crashed_process_with_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "svc.log"
    proc = common.spawn(
        "svc",
        [sys.executable, "-c", "print('boom: cannot bind'); raise SystemExit(3)"],
        log_path=log,
        pid_path=tmp_path / "svc.pid",
    )
    with pytest.raises(common.PlatformError) as info:
        common.wait_until("svc", lambda: False, timeout=20, log_path=log, proc=proc)
    message = str(info.value)
    assert "exited with code 3" in message
    assert "boom: cannot bind" in message
    assert info.value.component == "svc"


def test_stop_pid_stops_process_group_and_is_idempotent(tmp_path: Path) -> None:
    pid_path = tmp_path / "sleep.pid"
    proc = common.spawn(
        "sleep", ["sleep", "60"], log_path=tmp_path / "sleep.log", pid_path=pid_path
    )
    common.stop_pid(pid_path, grace=5)
    assert proc.wait(timeout=5) is not None
    assert not pid_path.exists()
    common.stop_pid(pid_path)  # nothing left to stop: no error


def test_missing_executable_is_a_platform_error(tmp_path: Path) -> None:
    with pytest.raises(common.PlatformError, match="cannot execute"):
        common.spawn(
            "ghost", ["/nonexistent/bin/ghost"], log_path=tmp_path / "g.log", pid_path=tmp_path / "g.pid"
        )


def test_run_logged_failure_names_component(tmp_path: Path) -> None:
    with pytest.raises(common.PlatformError, match=r"^mvn: .*exit code 2"):
        common.run_logged("mvn", ["bash", "-c", "echo nope; exit 2"], log_path=tmp_path / "p.log")


def test_a_component_with_a_dead_process_behind_a_live_endpoint_is_not_healthy(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        endpoint = f"127.0.0.1:{server.getsockname()[1]}"
        kube_dir = tmp_path / "kube"
        kube_dir.mkdir()
        alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        try:
            (kube_dir / "kube-apiserver.pid").write_text(str(alive.pid))
            assert orchestrate._healthy("kube", {"probe": endpoint}, tmp_path)
            (kube_dir / "etcd.pid").write_text(str(dead.pid))  # etcd died, the apiserver still answers
            assert not orchestrate._healthy("kube", {"probe": endpoint}, tmp_path)
        finally:
            alive.kill()
            alive.wait()


def test_maven_copy_argv_copies_runtime_dependencies_quietly() -> None:
    argv = common.maven_copy_argv("/usr/bin/mvn", Path("/c/pom.xml"), Path("/c/libs.partial"))
    assert argv == [
        "/usr/bin/mvn", "-B", "-ntp", "-f", "/c/pom.xml", "dependency:copy-dependencies",
        "-DincludeScope=runtime", "-DoutputDirectory=/c/libs.partial",
    ]


def _fake_mvn(bin_dir: Path, calls: Path) -> None:
    """An ``mvn`` on PATH that records its call and 'copies' two jars into -DoutputDirectory."""
    bin_dir.mkdir()
    script = bin_dir / "mvn"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$@" >> {calls}\n'
        'for arg in "$@"; do\n'
        '  case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac\n'
        "done\n"
        'mkdir -p "$out" && touch "$out/a-1.0.jar" "$out/b-2.0.jar"\n'
    )
    script.chmod(0o755)


def test_provision_maven_jars_runs_maven_once_and_marks_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    _fake_mvn(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    root = tmp_path / "cache"
    root.mkdir()
    lines: list[str] = []

    def finish(staging: Path, log_path: Path) -> str:
        (staging / "b-2.0.jar").unlink()  # a component may prune what Maven copied
        return "a-1.0.jar\n"

    def provision() -> Path:
        return common.provision_maven_jars(
            "thing", root, "libs", "<project/>", what="resolving thing jars", finish=finish, log=lines.append
        )

    libs = provision()
    assert libs == root / "libs"
    assert sorted(p.name for p in libs.iterdir()) == ["a-1.0.jar"]
    assert (root / "pom.xml").read_text() == "<project/>"
    assert (root / common.PROVISIONED_MARKER).read_text() == "a-1.0.jar\n"
    assert not (root / "libs.partial").exists()
    assert lines[0] == f"thing: resolving thing jars with Maven (log: {root / 'provision.log'})"
    assert lines[1].startswith("thing: 1 jars ready in ")
    assert provision() == libs  # marked: Maven does not run again
    assert len(calls.read_text().splitlines()) == 1


def test_provision_maven_jars_leaves_no_marker_when_the_jars_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_mvn(tmp_path / "bin", tmp_path / "calls")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    root = tmp_path / "cache"
    root.mkdir()

    def finish(staging: Path, log_path: Path) -> str:
        raise common.PlatformError("thing", "thing.jar missing after resolution", log_path)

    with pytest.raises(common.PlatformError, match=r"thing\.jar missing"):
        common.provision_maven_jars("thing", root, "libs", "<project/>", what="x", finish=finish, log=print)
    assert not (root / common.PROVISIONED_MARKER).exists()
    assert not (root / "libs").exists()


def test_provision_maven_jars_without_maven_names_the_component(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(common.PlatformError, match=r"^thing: mvn \(Apache Maven\) not found"):
        common.provision_maven_jars("thing", tmp_path, "libs", "", what="x", finish=lambda s, p: "")
