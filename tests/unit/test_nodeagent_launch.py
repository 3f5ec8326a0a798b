"""Node agent: the container launcher (bind mounts in a private mount namespace, then exec)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sluice_dev.nodeagent.agent import mount_namespaces_work


def test_this_machine_permits_private_mount_namespaces() -> None:
    # the agent falls back to symlinks without them; our machines and CI must have them
    assert mount_namespaces_work()


def launch(tmp_path: Path, spec: dict, namespace: bool) -> subprocess.CompletedProcess[str]:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({**spec, "namespace": namespace, "uts": namespace}))
    argv = [sys.executable, "-m", "sluice_dev.nodeagent.launch", str(spec_path)]
    if namespace:
        argv = ["unshare", "--mount", "--uts", "--propagation", "private", "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_exec_with_env_and_cwd_without_namespace(tmp_path: Path) -> None:
    result = launch(
        tmp_path,
        {
            "argv": ["sh", "-c", 'echo "$GREETING $(pwd)"; exit 3'],
            "env": {"GREETING": "hello", "PATH": "/usr/bin:/bin"},
            "cwd": str(tmp_path / "work"),
            "mounts": [],
        },
        namespace=False,
    )
    assert result.returncode == 3
    assert result.stdout.strip() == f"hello {tmp_path / 'work'}"


def test_missing_program_exits_128(tmp_path: Path) -> None:
    result = launch(
        tmp_path, {"argv": ["/nonexistent/prog"], "env": {}, "cwd": None, "mounts": []}, namespace=False
    )
    assert result.returncode == 128 and "cannot start container" in result.stderr


def test_bind_mounts_are_private_and_read_only_where_asked(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "key").write_text("value")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.10.0.9\tmypod\n")
    target = tmp_path / "mnt" / "config"
    result = launch(
        tmp_path,
        {
            "argv": [
                "sh",
                "-c",
                f"cat {target}/key; echo; hostname; grep mypod /etc/hosts; "
                f"touch {target}/new 2>/dev/null && echo writable || echo read-only",
            ],
            "env": {"PATH": "/usr/bin:/bin"},
            "cwd": None,
            "hostname": "mypod",
            "mounts": [
                {"src": str(volume), "dst": str(target), "readOnly": True},
                {"src": str(hosts), "dst": "/etc/hosts", "readOnly": True},
            ],
        },
        namespace=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == ["value", "mypod", "127.10.0.9\tmypod", "read-only"]
    assert not (target / "key").exists()  # the mount never appeared outside
    assert "mypod" not in Path("/etc/hosts").read_text()


def test_volume_over_an_ancestor_hides_neither_sources_nor_image_files(tmp_path: Path) -> None:
    """A pod's emptyDir on the parent of everything (like /tmp while the checkout lives in /tmp)."""
    parent = tmp_path / "host"
    empty = parent / "pod-empty-dir"
    config = parent / "config-volume"
    image = parent / "checkout"
    for d in (empty, config, image):
        d.mkdir(parents=True)
    (config / "key").write_text("value\n")
    (image / "program.sh").write_text("echo image-file")
    result = launch(
        tmp_path,
        {
            "argv": ["sh", "-c", f"sh {image}/program.sh; cat {parent}/mnt/key; ls {parent}"],
            "env": {"PATH": "/usr/bin:/bin"},
            "cwd": None,
            "mounts": [
                {"src": str(empty), "dst": str(parent)},
                {"src": str(config), "dst": str(parent / "mnt"), "readOnly": True},
            ],
            "keep": [str(image)],
        },
        namespace=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert lines[:2] == ["image-file", "value"]
    assert "pod-empty-dir" not in lines  # the parent really is the pod's empty volume
