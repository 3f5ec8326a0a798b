"""Which connector jars go with which Spark: the one record of the pairing.

The runtime image (``runtime-image/kafka-connector/pom.xml``, checked against this record by a
unit test; ``runtime-image/Dockerfile`` writes what it copied into ``/opt/sluice/versions.json``
and refuses to build when that differs from here), the development cache
(``devtools/sluice_dev/platform/sparkjars.py``, whose POM is rendered from here) and the
``--resolve-connector`` fallback (:mod:`sluice_runtime.connector`) all follow this record.

Rule: each connector artifact is the image's Spark version where that version is published on
Maven's default repository, else the newest published version below it (same Scala). The image
tests ask Maven for every version between the recorded one and Spark's and fail when a newer one
is published but unused (``tests/images/test_connector_published.py``).

To add a connector (``spark-protobuf``, ``hadoop-aws`` with the Hadoop PySpark
ships, ...): add an :class:`Artifact` below, regenerate the POM (the unit test prints how) and
rebuild the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

#: the Spark of the image: pyproject's ``runtime`` extra pins ``pyspark==SPARK`` (a unit test checks)
SPARK: Final = "4.3.0"
#: the Scala binary version of that Spark's artifacts
SCALA: Final = "2.13"


class Rule(StrEnum):
    #: the artifact of the image's Spark version itself
    SPARK = "spark"
    #: Spark's own version is not published: the newest published version below it
    NEWEST_PUBLISHED = "newest-published"
    #: the Hadoop PySpark ships (its ``hadoop-client-api-<version>.jar``)
    HADOOP = "hadoop"
    #: the version that Hadoop's own build of ``hadoop-aws`` declares (its AWS SDK v2)
    HADOOP_BUILD = "hadoop-build"


@dataclass(frozen=True)
class Artifact:
    """One connector artifact the image ships next to Spark's own jars."""

    #: short name, shown by ``sluice-runtime --version`` and in the driver's status
    name: str
    group: str
    artifact: str
    version: str
    rule: Rule
    #: why this version (the text ``sluice-runtime --version`` shows)
    why: str
    #: ``group:artifact`` left out of this artifact's dependencies in the POM
    exclusions: tuple[str, ...] = ()

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


_UNPUBLISHED = (
    f"Spark {SPARK}'s own is not published on Maven Central as reachable here (checked 2026-11-25); "
    "the newest published version below it"
)

ARTIFACTS: Final[tuple[Artifact, ...]] = (
    Artifact(
        name="kafka",
        group="org.apache.spark",
        artifact=f"spark-sql-kafka-0-10_{SCALA}",
        version="4.2.0",
        rule=Rule.NEWEST_PUBLISHED,
        why=_UNPUBLISHED,
        # the token provider is its own entry (it may be published in other versions)
        exclusions=(f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA}",),
    ),
    Artifact(
        name="kafka-token-provider",
        group="org.apache.spark",
        artifact=f"spark-token-provider-kafka-0-10_{SCALA}",
        version="4.2.0",
        rule=Rule.NEWEST_PUBLISHED,
        why=_UNPUBLISHED,
        # kafka-clients comes with the connector
        exclusions=("org.apache.kafka:kafka-clients",),
    ),
    Artifact(
        # from_avro/to_avro for avro sources and sinks (Confluent wire format, see
        # sluice_runtime.avro); Avro itself and xz come with PySpark's own jars
        name="avro",
        group="org.apache.spark",
        artifact=f"spark-avro_{SCALA}",
        version="4.2.0",
        rule=Rule.NEWEST_PUBLISHED,
        why=_UNPUBLISHED + " (4.2.1 neither; checked 2026-11-27)",
    ),
)


#: the Hadoop of PySpark's jars (``pyspark/jars/hadoop-client-api-<HADOOP>.jar``; a unit test checks)
HADOOP: Final = "3.5.0"
#: the AWS SDK v2 that Hadoop HADOOP builds ``hadoop-aws`` against (``aws-java-sdk-v2.version`` of
#: ``org.apache.hadoop:hadoop-project:<HADOOP>``)
AWS_SDK: Final = "2.35.4"

_AWS_SDK_WHY = (
    f"the AWS SDK v2 Hadoop {HADOOP} builds hadoop-aws with; its modules, not the ~700 MB bundle"
)

#: ``s3a://`` for checkpoints in object storage: Hadoop's S3A file system for the Hadoop PySpark
#: ships, the AWS SDK v2 modules it needs (not ``software.amazon.awssdk:bundle``; the rest comes
#: transitively, minus what PySpark ships) and Spark's cloud checkpoint file manager
#: (``AbortableStreamBasedCheckpointFileManager``). Resolved for tests and the local platform by
#: ``sluice_dev.platform.objectstore``, and in the runtime image by its ``s3a-connector`` stage.
S3A_ARTIFACTS: Final[tuple[Artifact, ...]] = (
    Artifact(
        name="hadoop-aws",
        group="org.apache.hadoop",
        artifact="hadoop-aws",
        version=HADOOP,
        rule=Rule.HADOOP,
        why=f"the Hadoop PySpark {SPARK} ships",
        # the SDK's individual modules below instead of its shaded bundle
        exclusions=("software.amazon.awssdk:bundle",),
    ),
    Artifact(
        name="aws-sdk-s3",
        group="software.amazon.awssdk",
        artifact="s3",
        version=AWS_SDK,
        rule=Rule.HADOOP_BUILD,
        why=_AWS_SDK_WHY,
    ),
    Artifact(
        name="aws-sdk-s3-transfer-manager",
        group="software.amazon.awssdk",
        artifact="s3-transfer-manager",
        version=AWS_SDK,
        rule=Rule.HADOOP_BUILD,
        why=_AWS_SDK_WHY,
    ),
    Artifact(
        name="aws-sdk-sts",
        group="software.amazon.awssdk",
        artifact="sts",
        version=AWS_SDK,
        rule=Rule.HADOOP_BUILD,
        why=_AWS_SDK_WHY,
    ),
    Artifact(
        name="hadoop-cloud",
        group="org.apache.spark",
        artifact=f"spark-hadoop-cloud_{SCALA}",
        version="4.1.2",
        rule=Rule.NEWEST_PUBLISHED,
        why=_UNPUBLISHED + " (neither 4.2.0 nor 4.1.0 is published; checked 2026-11-27)",
        # its classes alone: hadoop-aws, the SDK and the other clouds' connectors are not wanted
        exclusions=("*:*",),
    ),
)


def by_name(name: str) -> Artifact:
    for artifact in ARTIFACTS:
        if artifact.name == name:
            return artifact
    raise KeyError(name)


def version_key(version: str) -> tuple[int, ...]:
    """``"4.2.0"`` -> ``(4, 2, 0)`` (numeric parts before any qualifier)."""
    parts: list[int] = []
    for part in version.split("-", 1)[0].split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)
