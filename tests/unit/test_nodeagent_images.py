"""Node agent: the image catalog and the container argv."""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice_dev.nodeagent.images import DEFAULT_CATALOG, Catalog, ImageError, argv_for

REPO = Path(__file__).resolve().parents[2]


def test_default_catalog_runs_the_runtime_from_the_repo_venv() -> None:
    catalog = Catalog.load()
    image = catalog.find("ghcr.io/sluice/sluice-runtime:0.1.0")
    assert image is not None
    runtime = str(REPO / ".venv/bin/sluice-runtime")
    # like the runtime image: ENTRYPOINT sluice-runtime, CMD run; Spark's executor pods pass
    # the argument `executor`
    assert image.entrypoint == [runtime] and image.cmd == ["run"]
    assert argv_for({"name": "c", "image": "sluice-runtime:0.1.0"}, image) == [runtime, "run"]
    assert argv_for({"name": "c", "image": "sluice-runtime:0.1.0", "args": ["executor"]}, image) == [
        runtime, "executor"]
    assert catalog.find("sluice-runtime:dev") is image
    assert catalog.find("unknown/thing:1") is None
    assert DEFAULT_CATALOG.exists()


def test_patterns_match_with_and_without_registry_and_default_tag(tmp_path: Path) -> None:
    catalog = Catalog.from_dict(
        {
            "baseDir": ".",
            "images": [
                {"match": "app:latest", "entrypoint": ["bin/app"], "cmd": ["serve"], "env": {"MODE": "x"}},
                {"match": "registry.local/tools/*", "entrypoint": ["tool"]},
            ],
        },
        tmp_path,
    )
    app = catalog.find("registry.local:5000/team/app")
    assert app is not None and app.entrypoint == [str(tmp_path / "bin/app")] and app.env == {"MODE": "x"}
    assert catalog.find("app@sha256:abc") is app
    tool = catalog.find("registry.local/tools/cli:2")
    assert tool is not None and tool.entrypoint == ["tool"]  # a bare name stays a PATH lookup


def test_argv_follows_docker_entrypoint_cmd_rules(tmp_path: Path) -> None:
    catalog = Catalog.from_dict(
        {"images": [{"match": "app:*", "entrypoint": ["/bin/app"], "cmd": ["serve"]}]}, tmp_path
    )
    image = catalog.find("app:1")
    assert argv_for({"name": "c", "image": "app:1"}, image) == ["/bin/app", "serve"]
    assert argv_for({"name": "c", "args": ["migrate"]}, image) == ["/bin/app", "migrate"]
    assert argv_for({"name": "c", "command": ["sh", "-c"], "args": ["echo"]}, image) == ["sh", "-c", "echo"]
    assert argv_for({"name": "c", "command": ["python3"]}, None) == ["python3"]
    with pytest.raises(ImageError, match="image catalog"):
        argv_for({"name": "c", "image": "nope:1"}, None)


def test_base_env_only_inherits_listed_variables() -> None:
    catalog = Catalog(inherit_env=["PATH", "HOME"])
    assert catalog.base_env({"PATH": "/bin", "HOME": "/root", "KUBECONFIG": "/admin"}) == {
        "PATH": "/bin",
        "HOME": "/root",
    }
