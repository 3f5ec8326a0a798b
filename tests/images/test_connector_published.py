"""The recorded connector versions are the newest published for the image's Spark (asks Maven).

For each artifact of ``sluice_runtime/pairing.py``: the recorded version is published, and no
version between it and the Spark version is (Spark's own included): when one is, the test fails
naming it, and the record should move to it. Maven that cannot answer (no network, no ``mvn``)
fails the test too; nothing is skipped. About 2 s per question, answered from ``~/.m2`` when found.
"""

from __future__ import annotations

import pytest
from sluice_dev.images import published
from sluice_runtime import pairing

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("artifact", pairing.ARTIFACTS, ids=lambda a: a.name)
def test_recorded_connector_is_published(artifact: pairing.Artifact) -> None:
    assert published.is_published(artifact.coordinates), f"{artifact.coordinates} is not published"


@pytest.mark.parametrize("artifact", pairing.ARTIFACTS, ids=lambda a: a.name)
def test_no_newer_matching_connector_is_published_but_unused(artifact: pairing.Artifact) -> None:
    if artifact.rule is pairing.Rule.SPARK:
        assert artifact.version == pairing.SPARK
        return
    newer = published.unused_newer(artifact)
    assert not newer, (
        f"{artifact.group}:{artifact.artifact} {', '.join(newer)} is published, newer than the "
        f"recorded {artifact.version} and at most Spark {pairing.SPARK}: move the record "
        "(sluice_runtime/pairing.py) and regenerate the POM"
    )
