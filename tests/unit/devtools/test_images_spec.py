"""The image build's pure parts: content keys, build context, argv, runc config; file agreement."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from sluice.operator.builders.context import RUN_AS_USER, default_image
from sluice_dev.images import bundle, spec
from sluice_dev.platform import objectstore, sparkjars
from sluice_runtime import pairing

from tests.support import paths

REPO = paths.REPO


def _fake_repo(root: Path) -> Path:
    for rel, text in {
        "pyproject.toml": "[project]\n", "README.md": "hi\n", "operator/Dockerfile": "FROM x\n",
        "operator/sluice/a.py": "A = 1\n", "runtime-image/Dockerfile": "FROM y\n",
        "runtime-image/sluice_runtime/b.py": "B = 1\n", "devtools/sluice_dev/c.py": "C = 1\n",
        "tests/test_x.py": "pass\n",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_context_files_are_what_the_dockerignore_lets_through(tmp_path: Path) -> None:
    root = _fake_repo(tmp_path)
    (root / "operator/sluice/__pycache__").mkdir()
    (root / "operator/sluice/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")
    (root / "operator/sluice.egg-info").mkdir()
    (root / "operator/sluice.egg-info/PKG-INFO").write_text("x")
    files = [p.as_posix() for p in spec.context_files(root)]
    assert files == sorted([
        "README.md", "operator/sluice/a.py", "pyproject.toml", "runtime-image/sluice_runtime/b.py",
    ])
    assert [p.as_posix() for p in spec.context_files(root, spec.OPERATOR.sources)] == [
        "README.md", "operator/sluice/a.py", "pyproject.toml"]


def test_image_key_follows_sources_dockerfile_and_base_but_not_caches(tmp_path: Path) -> None:
    root = _fake_repo(tmp_path)
    key = spec.image_key(root, spec.RUNTIME, "base1")
    assert key == spec.image_key(root, spec.RUNTIME, "base1")
    assert key != spec.image_key(root, spec.OPERATOR, "base1")
    assert key != spec.image_key(root, spec.RUNTIME, "base2")
    operator_key = spec.image_key(root, spec.OPERATOR, "base1")
    (root / "tests/test_x.py").write_text("changed\n")
    (root / "devtools/sluice_dev/c.py").write_text("C = 2\n")
    (root / "operator/sluice/__pycache__").mkdir()
    (root / "operator/sluice/__pycache__/a.pyc").write_bytes(b"\1")
    assert key == spec.image_key(root, spec.RUNTIME, "base1")
    (root / "operator/sluice/a.py").write_text("A = 2\n")
    changed = spec.image_key(root, spec.RUNTIME, "base1")
    assert changed != key
    assert spec.image_key(root, spec.OPERATOR, "base1") != operator_key
    operator_key = spec.image_key(root, spec.OPERATOR, "base1")
    (root / "runtime-image/Dockerfile").write_text("FROM z\n")
    (root / "runtime-image/sluice_runtime/b.py").chmod(0o755)
    assert spec.image_key(root, spec.RUNTIME, "base1") not in (key, changed)
    assert spec.image_key(root, spec.OPERATOR, "base1") == operator_key  # copies no runtime-image/
    (root / ".dockerignore").write_text("*\n")
    assert spec.image_key(root, spec.OPERATOR, "base1") != operator_key


def test_content_key_is_unambiguous() -> None:
    assert spec.content_key([("a", b"bc")]) != spec.content_key([("ab", b"c")])
    assert spec.content_key([("a", b""), ("b", b"")]) != spec.content_key([("a", b"\0b\x000\0")])


def test_base_key_depends_on_suite_variant_and_sources() -> None:
    key = spec.base_key("bookworm", "minbase", b"Types: deb\n")
    assert key == spec.base_key("bookworm", "minbase", b"Types: deb\n")
    assert key != spec.base_key("trixie", "minbase", b"Types: deb\n")
    assert key != spec.base_key("bookworm", "apt", b"Types: deb\n")
    assert key != spec.base_key("bookworm", "minbase", b"Types: deb-src\n")


def test_dockerignore_matches_the_hashed_context() -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    assert tuple(line[1:] for line in lines if line.startswith("!")) == spec.CONTEXT_INCLUDE
    assert tuple(line[3:] for line in lines if line.startswith("**/")) == spec.CONTEXT_EXCLUDE


def test_dockerfiles_copy_only_hashed_context_and_run_as_the_pods_user() -> None:
    for image in spec.IMAGES:
        text = (REPO / image.dockerfile).read_text()
        assert text.startswith("#") and "FROM debian:bookworm-slim AS base" in text
        for match in re.finditer(r"^COPY (?!--from)(.+) \S+$", text, re.MULTILINE):
            for source in match.group(1).split():
                assert source.split("/")[0] in image.sources, (image.dockerfile, source)
        assert set(image.sources) <= set(spec.CONTEXT_INCLUDE)
        assert f"USER {RUN_AS_USER}:{RUN_AS_USER}" in text
        assert f"--uid {RUN_AS_USER} --gid {RUN_AS_USER}" in text
        assert "http://" not in text and "https://" not in text
    assert default_image() == f"{spec.RUNTIME.name}:{spec.VERSION}"


def test_runtime_extra_pins_the_spark_of_the_connector() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert f"pyspark=={sparkjars.SPARK_VERSION}" in project["optional-dependencies"]["runtime"]


def test_connector_pom_is_rendered_from_the_pairing_record() -> None:
    committed = (REPO / sparkjars.IMAGE_POM).read_text()
    assert committed == sparkjars.image_pom(), (
        f"{sparkjars.IMAGE_POM} departs from sluice_runtime/pairing.py; regenerate it: .venv/bin/python "
        "-c 'from sluice_dev.platform import sparkjars; print(sparkjars.image_pom(), end=\"\")' "
        f"> {sparkjars.IMAGE_POM}"
    )

    def dependencies(pom: str) -> str:
        return pom[pom.index("<dependencies>"):pom.index("</dependencies>")]

    assert dependencies(committed) == dependencies(sparkjars.render_pom())  # the dev platform's


def test_s3a_pom_is_rendered_from_the_pairing_record() -> None:
    committed = (REPO / objectstore.S3A_IMAGE_POM).read_text()
    assert committed == objectstore.s3a_image_pom(), (
        f"{objectstore.S3A_IMAGE_POM} departs from sluice_runtime/pairing.py S3A_ARTIFACTS; regenerate it: "
        ".venv/bin/python -c 'from sluice_dev.platform import objectstore; "
        f"print(objectstore.s3a_image_pom(), end=\"\")' > {objectstore.S3A_IMAGE_POM}"
    )

    def dependencies(pom: str) -> str:
        return pom[pom.index("<dependencies>"):pom.index("</dependencies>")]

    assert dependencies(committed) == dependencies(objectstore.s3a_pom())  # the dev platform's
    for artifact in pairing.S3A_ARTIFACTS:
        version = f"      <version>{artifact.version}</version>"
        assert f"<artifactId>{artifact.artifact}</artifactId>\n{version}" in committed
    # the runtime image resolves it in a stage of its own and adds the jars by the shared rule
    dockerfile = (REPO / spec.RUNTIME.dockerfile).read_text()
    assert f"COPY {objectstore.S3A_IMAGE_POM} /build/pom.xml" in dockerfile
    assert "COPY --from=s3a-connector /build/jars /build/s3a-connector" in dockerfile
    assert re.search(r"RUN python /build/jarset.py .*\s+/build/kafka-connector /build/s3a-connector\n",
                     dockerfile)


def test_chart_starts_the_operator_image_as_its_user() -> None:
    deployment = (REPO / "charts/sluice/templates/deployment.yaml").read_text()
    helpers = (REPO / "charts/sluice/templates/_helpers.tpl").read_text()  # the pods' securityContext
    values = (REPO / "charts/sluice/values.yaml").read_text()
    assert f"repository: {spec.OPERATOR.name}" in values
    assert 'command: ["sluice", "operator"]' in deployment
    assert f"runAsUser: {RUN_AS_USER}" in helpers


def test_build_push_and_import_argv() -> None:
    buildah = spec.buildah_global(Path("/c/storage"), Path("/c/run"))
    assert buildah == ["buildah", "--root", "/c/storage", "--runroot", "/c/run"]
    argv = spec.build_argv(buildah, spec.RUNTIME, Path("/repo"), version="1.2.3", volumes=["/a:/a:ro"])
    assert argv[:6] == [*buildah, "build"]
    assert argv[-1] == "/repo"
    for flag in ("--pull-never", "--layers"):
        assert flag in argv
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("--isolation") + 1] == "chroot"
    assert argv[argv.index("-f") + 1] == "/repo/runtime-image/Dockerfile"
    assert argv[argv.index("-t") + 1] == "localhost/sluice-runtime:1.2.3"
    assert argv[argv.index("-v") + 1] == "/a:/a:ro"
    push = spec.push_argv(buildah, spec.OPERATOR, Path("/c/op.oci.tar"), version="1.2.3")
    assert push[-2:] == ["localhost/sluice-operator:1.2.3",
                         "oci-archive:/c/op.oci.tar:localhost/sluice-operator:1.2.3"]
    assert spec.ctr_import_argv(Path("/c/op.oci.tar"), "/run/c.sock") == [
        "ctr", "--address", "/run/c.sock", "--namespace", "k8s.io", "images", "import", "/c/op.oci.tar"]
    assert spec.mmdebstrap_argv("bookworm", "minbase", Path("/o.tar"), Path("/s.sources")) == [
        "mmdebstrap", "--variant=minbase", "bookworm", "/o.tar", "/s.sources"]
    name = spec.archive_name(spec.RUNTIME, "ab" * 32, "1.2.3")
    assert name == "sluice-runtime-1.2.3-abababababababab.oci.tar"
    assert spec.by_name("sluice-operator") is spec.OPERATOR


def test_runc_config_runs_the_command_read_only_with_a_tmpfs() -> None:
    config = {
        "process": {"args": ["sluice-runtime", "run"], "terminal": True, "env": ["PATH=/bin"],
                    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc"}, {"destination": "/tmp", "type": "bind"}],
        "linux": {"resources": {"devices": []}, "cgroupsPath": "/x"},
    }
    changed = bundle.adapt_config(config, ["id", "-u"], env=["A=1"])
    assert config["process"]["args"] == ["sluice-runtime", "run"]  # not modified in place
    assert changed["process"]["args"] == ["id", "-u"]
    assert changed["process"]["terminal"] is False
    assert changed["process"]["env"] == ["PATH=/bin", "A=1"]
    assert "rlimits" not in changed["process"]
    assert changed["root"]["readonly"] is True
    assert [m["destination"] for m in changed["mounts"]] == ["/proc", "/tmp"]
    assert changed["mounts"][-1]["type"] == "tmpfs"
    assert changed["linux"] == {}


def test_umoci_tag_is_added_to_the_index(tmp_path: Path) -> None:
    index = {"schemaVersion": 2, "manifests": [{"digest": "sha256:1", "annotations": {
        "org.opencontainers.image.ref.name": "localhost/sluice-runtime:0.1.0"}}]}
    (tmp_path / "index.json").write_text(json.dumps(index))
    bundle.tag_for_umoci(tmp_path, "smoke")
    manifests = json.loads((tmp_path / "index.json").read_text())["manifests"]
    assert [m["annotations"]["org.opencontainers.image.ref.name"] for m in manifests] == [
        "localhost/sluice-runtime:0.1.0", "smoke"]
    assert manifests[1]["digest"] == "sha256:1"
