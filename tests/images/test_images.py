"""Image smoke tests: both images built from the Dockerfiles (buildah), run in a real container (runc).

The archives come from ``sluice_dev.images.build`` (cached by content: seconds when nothing
changed, a full build on a fresh machine); most checks unpack an archive with umoci and run a
command in it with runc, read-only root and a tmpfs on /tmp as the pods have, as the image's
own user. The last ones load both archives into a private, transient containerd the way the node
does (``load_into_containerd``) and run them with ``ctr run``. A tool that cannot start fails the
tests with its name and log; nothing is skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sluice.operator.builders.context import RUN_AS_USER
from sluice_dev.images import build, bundle, spec
from sluice_dev.platform import common
from sluice_runtime import pairing, versions

pytestmark = pytest.mark.integration

_IMPORTS = "import pyspark, pydantic, sqlglot, yaml, confluent_kafka, prometheus_client, sluice_runtime"
_JARS = (
    "import os, pyspark; d = os.path.join(os.path.dirname(pyspark.__file__), 'jars'); "
    "print('\\n'.join(sorted(os.listdir(d))))"
)


@pytest.fixture(scope="module")
def archives() -> dict[str, Path]:
    if os.geteuid() != 0:
        pytest.fail("the image smoke tests need root (buildah, umoci and runc run as root)")
    return build.build()


@pytest.fixture(scope="module")
def runtime_bundle(archives: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with bundle.unpack_bundle(archives[spec.RUNTIME.name], tmp_path_factory.mktemp("runtime")) as path:
        yield path


@pytest.fixture(scope="module")
def operator_bundle(archives: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with bundle.unpack_bundle(archives[spec.OPERATOR.name], tmp_path_factory.mktemp("operator")) as path:
        yield path


def _ok(result: bundle.Result) -> str:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


def test_archives_carry_the_names_the_kubelet_resolves(archives: dict[str, Path]) -> None:
    assert set(archives) == {s.name for s in spec.IMAGES}
    for name, archive in archives.items():
        assert archive.is_file() and archive.name.startswith(f"{name}-{spec.VERSION}-")


def test_runtime_help(runtime_bundle: Path) -> None:
    out = _ok(bundle.run_in_bundle(runtime_bundle, ["sluice-runtime", "--help"]))
    assert "usage: sluice-runtime" in out
    assert "executor" in out


def test_runtime_entrypoint_is_sluice_runtime(runtime_bundle: Path) -> None:
    config = bundle.image_config(runtime_bundle)
    assert config["process"]["args"][:2] == ["sluice-runtime", "run"]
    assert config["process"]["user"]["uid"] == RUN_AS_USER
    assert config["process"]["user"]["gid"] == RUN_AS_USER


def test_runtime_runs_as_the_pods_user(runtime_bundle: Path) -> None:
    out = _ok(bundle.run_in_bundle(runtime_bundle, ["id", "-u", "-n"]))
    assert out.strip() == "sluice"
    assert _ok(bundle.run_in_bundle(runtime_bundle, ["id", "-u"])).strip() == str(RUN_AS_USER)
    assert _ok(bundle.run_in_bundle(runtime_bundle, ["id", "-g"])).strip() == str(RUN_AS_USER)


def test_runtime_imports_its_dependencies(runtime_bundle: Path) -> None:
    out = _ok(bundle.run_in_bundle(runtime_bundle, [
        "python", "-c", f"{_IMPORTS}; print(pyspark.__version__)"]))
    assert out.strip() == "4.3.0"


def test_runtime_has_java_17(runtime_bundle: Path) -> None:
    result = bundle.run_in_bundle(runtime_bundle, ["java", "-version"])
    _ok(result)
    assert 'version "17.' in result.stderr


def test_runtime_has_the_kafka_connector_in_sparks_jars(runtime_bundle: Path) -> None:
    jars = _ok(bundle.run_in_bundle(runtime_bundle, ["python", "-c", _JARS])).split()
    for prefix in ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-",
                   "kafka-clients-", "commons-pool2-", "spark-avro_2.13-"):
        assert [jar for jar in jars if jar.startswith(prefix)], prefix
    # one copy of each library: nothing the connector brought that pyspark already ships
    assert len([jar for jar in jars if jar.startswith("scala-library-")]) == 1


def test_runtime_has_the_s3a_jars_in_sparks_jars_one_copy_of_each_library(runtime_bundle: Path) -> None:
    jars = versions.parse_jars(_ok(bundle.run_in_bundle(runtime_bundle, ["python", "-c", _JARS])).split())
    shipped = {j.artifact: j.version for j in jars}
    for artifact in pairing.S3A_ARTIFACTS:
        assert shipped.get(artifact.artifact) == artifact.version, artifact.artifact
    assert shipped["hadoop-client-api"] == pairing.HADOOP
    # what PySpark ships (Netty, httpclient, slf4j, ...) or covers (commons-logging) is not added again
    manifest = json.loads(_ok(bundle.run_in_bundle(runtime_bundle, ["cat", "/opt/sluice/versions.json"])))
    added = {j["artifact"] for j in manifest["jars"]}
    assert {"hadoop-aws", "s3", "sts", "netty-nio-client", f"spark-hadoop-cloud_{pairing.SCALA}"} <= added
    twice = sorted(j.file for j in jars if j.artifact in added)
    assert len(twice) == len(added), twice
    assert not added & {"netty-buffer", "httpclient", "httpcore", "slf4j-api", "commons-codec",
                        "commons-logging"}
    assert "commons-logging" not in shipped and "jcl-over-slf4j" in shipped


_S3A_CLASSES = """
from pyspark.java_gateway import launch_gateway
jvm = launch_gateway().jvm
conf = jvm.org.apache.hadoop.conf.Configuration()
for key, value in {
    "fs.s3a.endpoint": "http://127.0.0.1:9", "fs.s3a.endpoint.region": "us-east-1",
    "fs.s3a.path.style.access": "true", "fs.s3a.connection.ssl.enabled": "false",
    "fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK",
    "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
}.items():
    conf.set(key, value)
fs = jvm.org.apache.hadoop.fs.Path("s3a://sluice/checkpoints").getFileSystem(conf)
print(fs.getClass().getName())
print(jvm.java.lang.Class.forName(
    "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager").getName())
fs.close()
"""


def test_runtime_loads_s3a_and_the_cloud_checkpoint_manager(runtime_bundle: Path) -> None:
    """Spark's JVM (PySpark's gateway, no network): the S3A file system initialises (its AWS SDK
    client built against PySpark's Hadoop, Netty and httpclient) and Spark's cloud checkpoint
    manager loads, from the jars in Spark's jars/ alone (no spark.jars)."""
    # no name service in the test container: the JVM names loopback
    env = ["SPARK_LOCAL_IP=127.0.0.1", "SPARK_LOCAL_HOSTNAME=localhost"]
    out = _ok(bundle.run_in_bundle(runtime_bundle, ["python", "-c", _S3A_CLASSES], env=env, timeout=300))
    assert out.split()[-2:] == ["org.apache.hadoop.fs.s3a.S3AFileSystem",
                                "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"]


def test_runtime_version_names_spark_and_the_recorded_connectors(runtime_bundle: Path) -> None:
    text = _ok(bundle.run_in_bundle(runtime_bundle, ["sluice-runtime", "--version"]))
    assert f"Spark {pairing.SPARK} " in text and "image: /opt/sluice/versions.json" in text
    for artifact in versions.RECORDED:  # the Kafka connector and the S3A set
        assert f"{artifact.artifact} {artifact.version}: " in text, (artifact.name, text)
    data = json.loads(_ok(bundle.run_in_bundle(runtime_bundle, ["sluice-runtime", "--version", "--output",
                                                                "json"])))
    manifest = versions.from_json(data, source="sluice-runtime --version --output json")
    assert manifest.spark == pairing.SPARK and manifest.java and manifest.java.startswith("17.")
    assert manifest.scala and manifest.scala.startswith(f"{pairing.SCALA}.")
    assert {c.name: c.version for c in manifest.connectors} == {a.name: a.version for a in versions.RECORDED}
    assert versions.summary(manifest)["spark"] == pairing.SPARK


def test_runtime_ships_only_the_recorded_pairing(runtime_bundle: Path) -> None:
    """A connector jar in Spark's jars whose version the record does not name fails here (the
    build refuses it too, in image_manifest), as does a Spark artifact of another version."""
    jars = versions.parse_jars(_ok(bundle.run_in_bundle(runtime_bundle, ["python", "-c", _JARS])).split())
    assert versions.pairing_problems(jars, pairing.SPARK) == []
    manifest = json.loads(_ok(bundle.run_in_bundle(runtime_bundle, ["cat", "/opt/sluice/versions.json"])))
    added = {j["file"] for j in manifest["jars"]}
    assert added and added <= {j.file for j in jars}
    assert {f"{a.artifact}-{a.version}.jar" for a in versions.RECORDED} <= added


def test_runtime_root_is_read_only_and_tmp_writable(runtime_bundle: Path) -> None:
    out = _ok(bundle.run_in_bundle(runtime_bundle, [
        "sh", "-c",
        "touch /opt/x 2>/dev/null && echo root-writable; touch /tmp/x && echo tmp-ok; echo $HOME",
    ]))
    assert out.split() == ["tmp-ok", "/tmp"]


def test_operator_version_and_help(operator_bundle: Path) -> None:
    from sluice import __version__

    version = _ok(bundle.run_in_bundle(operator_bundle, ["sluice", "--version"]))
    assert version.strip() == f"sluice {__version__}"
    out = _ok(bundle.run_in_bundle(operator_bundle, ["sluice", "operator", "--help"]))
    assert "--metrics-port" in out and "--log-format" in out


def test_operator_image_is_the_charts_command_as_non_root(operator_bundle: Path) -> None:
    config = bundle.image_config(operator_bundle)
    assert config["process"]["args"][:2] == ["sluice", "operator"]
    assert config["process"]["user"]["uid"] == RUN_AS_USER
    out = _ok(bundle.run_in_bundle(operator_bundle, [
        "python", "-c", "import os, kopf, kubernetes, sluice.operator, confluent_kafka.schema_registry; "
        "print(os.getuid())"]))
    assert out.strip() == str(RUN_AS_USER)


def test_operator_image_has_no_spark(operator_bundle: Path) -> None:
    result = bundle.run_in_bundle(operator_bundle, ["python", "-c", "import pyspark"])
    assert result.returncode != 0 and "No module named 'pyspark'" in result.stderr


_CONTAINERD_CONFIG = """\
version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{root}/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
"""


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A containerd of its own (no CRI), stopped and its state removed afterwards."""
    binary = shutil.which("containerd")
    if binary is None or shutil.which("ctr") is None:
        pytest.fail("containerd: not installed (apt-get install containerd)")
    root = tmp_path_factory.mktemp("containerd")
    (root / "config.toml").write_text(_CONTAINERD_CONFIG.format(root=root))
    socket = root / "containerd.sock"
    log_path, pid_path = root / "containerd.log", root / "containerd.pid"
    existed = _dirs_under(SHARED_RUN_DIR)
    proc = common.spawn("containerd", [binary, "--config", str(root / "config.toml")],
                        log_path=log_path, pid_path=pid_path)
    try:
        common.wait_until("containerd", socket.exists, timeout=30, log_path=log_path, proc=proc,
                          what="listen on its socket")
        yield socket
    finally:
        common.stop_pid(pid_path)
        shutil.rmtree(root, ignore_errors=True)
        # containerd 1.6 and ctr put shim sockets, FIFOs and runc state under /run/containerd
        # whatever the config says: remove the directories this test made there (empty by now)
        for path in sorted(_dirs_under(SHARED_RUN_DIR) - existed, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir()


#: where containerd 1.6 and ctr keep shim sockets, FIFOs and runc state regardless of ``root``
SHARED_RUN_DIR = Path("/run/containerd")


def _dirs_under(top: Path) -> set[Path]:
    """``top`` and every directory below it that exists now."""
    if not top.is_dir():
        return set()
    return {top, *(p for p in top.rglob("*") if p.is_dir())}


def _ctr(socket: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", "--address", str(socket), "--namespace", "k8s.io", *args],
                          capture_output=True, text=True, check=False, timeout=timeout)


@pytest.fixture(scope="module")
def loaded(containerd: Path, archives: dict[str, Path]) -> Path:
    for archive in archives.values():
        build.load_into_containerd(archive, str(containerd), log_path=containerd.parent / "import.log")
    return containerd


def test_archives_load_into_containerd_under_the_pods_names(loaded: Path) -> None:
    names = _ctr(loaded, "images", "ls", "--quiet").stdout.split()
    for image in spec.IMAGES:
        assert image.reference() in names


@pytest.mark.parametrize(("image", "args", "expected"), [
    (spec.OPERATOR, ["sluice", "--version"], "sluice " + spec.VERSION),
    (spec.RUNTIME, ["sluice-runtime", "--help"], "usage: sluice-runtime"),
    (spec.RUNTIME, ["sluice-runtime", "--version"], f"Spark {pairing.SPARK} "),
    (spec.RUNTIME, ["id", "-u"], str(RUN_AS_USER)),
    (spec.OPERATOR, ["id", "-u"], str(RUN_AS_USER)),
])
def test_images_run_under_containerd(
    loaded: Path, image: spec.ImageSpec, args: list[str], expected: str
) -> None:
    name = f"sluice-smoke-{os.getpid()}-{image.name}-{args[-1].strip('-')}"
    result = _ctr(loaded, "run", "--rm", "--read-only", image.reference(), name, *args)
    assert result.returncode == 0, f"ctr run: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert expected in result.stdout
