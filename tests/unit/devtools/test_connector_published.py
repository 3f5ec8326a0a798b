"""The "newer connector published but unused" check's pure parts: candidates, Maven's answers."""

from __future__ import annotations

import dataclasses

import pytest
from sluice_dev.images import published
from sluice_runtime import pairing


def test_candidates_are_every_version_that_could_come_between() -> None:
    assert published.newer_candidates("4.2.0", "4.3.0") == ["4.2.1", "4.3.0"]
    assert published.newer_candidates("4.0.0", "4.3.1") == ["4.0.1", "4.1.0", "4.2.0", "4.3.0", "4.3.1"]
    assert published.newer_candidates("4.3.0", "4.3.2") == ["4.3.1", "4.3.2"]
    assert published.newer_candidates("3.5.4", "4.1.0") == ["3.5.5", "3.6.0", "4.0.0", "4.1.0"]
    assert published.newer_candidates("4.3.0", "4.3.0") == []
    with pytest.raises(ValueError):
        published.newer_candidates("4.2", "4.3.0")


def test_maven_answers_are_found_not_found_or_a_failure() -> None:
    coords = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0"
    assert published.classify(coords, 0, "") is True
    missing = ("[ERROR] Failed to execute goal ...:get (default-cli) on project standalone-pom: Couldn't "
               "download artifact: Could not find artifact org.apache.spark:spark-sql-kafka-0-10_2.13:jar:"
               "4.3.0 in central")
    assert published.classify(coords, 1, missing) is False
    for output in ("Could not transfer artifact ...: Network is unreachable",
                   "Could not find artifact org.apache.spark:spark-sql-kafka-0-10_2.13:jar:4.2.0 in central"):
        with pytest.raises(published.MavenUnavailable, match="could not tell"):
            published.classify(coords, 1, output)
    argv = published.get_argv("/usr/bin/mvn", coords)
    assert argv[0] == "/usr/bin/mvn" and "-U" in argv and f"-Dartifact={coords}" in argv
    assert f"{published.DEPENDENCY_PLUGIN}:get" in argv and "-Dtransitive=false" in argv


def test_unused_newer_asks_for_each_candidate() -> None:
    asked: list[str] = []

    def fake(coordinates: str) -> bool:
        asked.append(coordinates)
        return coordinates.endswith(":4.2.1")

    artifact = dataclasses.replace(pairing.by_name("kafka"), version="4.2.0")
    assert published.unused_newer(artifact, "4.3.0", fake) == ["4.2.1"]
    assert asked == [f"org.apache.spark:{artifact.artifact}:{v}" for v in ("4.2.1", "4.3.0")]
