"""The recorded connector versions are the newest published for the image's Spark (asks Maven).

For each artifact of ``sluice_runtime/pairing.py`` the image ships (the Kafka connector and the S3A
set): the recorded version is published. For one recorded by the newest-published rule (the Kafka
connector, ``spark-hadoop-cloud``), no version between it and the Spark version is (Spark's own
included): when one is, the test fails naming it, and the record should move to it. hadoop-aws
follows the Hadoop PySpark ships (checked in the image, ``test_images.py``) and the AWS SDK
modules the version Hadoop's own build declares (``aws-java-sdk-v2.version`` of
``hadoop-project``, read from the POM Maven fetches). Maven that cannot answer (no network, no
``mvn``) fails the test too; nothing is skipped. About 2 s per question, answered from ``~/.m2``
when found.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from sluice_dev.images import published
from sluice_runtime import pairing, versions

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("artifact", versions.RECORDED, ids=lambda a: a.name)
def test_recorded_connector_is_published(artifact: pairing.Artifact) -> None:
    assert published.is_published(artifact.coordinates), f"{artifact.coordinates} is not published"


@pytest.mark.parametrize("artifact", versions.RECORDED, ids=lambda a: a.name)
def test_no_newer_matching_connector_is_published_but_unused(artifact: pairing.Artifact) -> None:
    if artifact.rule is pairing.Rule.SPARK:
        assert artifact.version == pairing.SPARK
        return
    if artifact.rule is pairing.Rule.HADOOP:
        assert artifact.version == pairing.HADOOP
        return
    if artifact.rule is pairing.Rule.HADOOP_BUILD:
        assert artifact.version == pairing.AWS_SDK
        return
    newer = published.unused_newer(artifact)
    assert not newer, (
        f"{artifact.group}:{artifact.artifact} {', '.join(newer)} is published, newer than the "
        f"recorded {artifact.version} and at most Spark {pairing.SPARK}: move the record "
        "(sluice_runtime/pairing.py) and regenerate the POMs"
    )


def test_recorded_aws_sdk_is_the_one_hadoop_builds_hadoop_aws_with(tmp_path: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise published.MavenUnavailable("mvn (Apache Maven) not found on PATH")
    coordinates = f"org.apache.hadoop:hadoop-project:{pairing.HADOOP}:pom"
    result = subprocess.run(
        [mvn, "-B", "-q", "-Dstyle.color=never", f"{published.DEPENDENCY_PLUGIN}:copy",
         f"-Dartifact={coordinates}", f"-DoutputDirectory={tmp_path}"],
        capture_output=True, text=True, check=False, timeout=300, cwd=tmp_path)
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, f"mvn could not fetch {coordinates}:\n{output}"
    pom = (tmp_path / f"hadoop-project-{pairing.HADOOP}.pom").read_text()
    declared = re.search(r"<aws-java-sdk-v2\.version>([^<]+)</aws-java-sdk-v2\.version>", pom)
    assert declared is not None, "hadoop-project declares no aws-java-sdk-v2.version"
    assert declared[1] == pairing.AWS_SDK, (
        f"Hadoop {pairing.HADOOP} builds hadoop-aws with AWS SDK {declared[1]}, the record says "
        f"{pairing.AWS_SDK} (sluice_runtime/pairing.py AWS_SDK)")
