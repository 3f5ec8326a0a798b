"""Ground truth for the upgrade classifier against real Kafka and PySpark.

Every pair of tests/corpus/upgrades runs here, in one SparkSession: the old query over the first
half, then the new query forced in place on the same checkpoint over the second half, and the
result is judged against the correct in-place outcome computed in plain Python
(tests/support/upgrade_harness.py). The replace outcomes (the new query on fresh checkpoints,
two more runs per replace pair) are not needed for the judgement and are left to ``python
bench/upgrade_ground_truth.py --write``, which regenerates docs/upgrade-evidence.md and the corpus
files' ``spark:`` blocks. SLUICE_GT_PAIRS=substring[,substring...] narrows the run (development).

A pair may document a classifier bug the ground truth found and that is not fixed yet
(``expect.groundTruth: over-strict``): the test then expects exactly that outcome, so it fails
both when Spark's behaviour changes and when the rule is fixed (remove the annotation then).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import upgrade_harness as h

pytestmark = pytest.mark.integration

ALL = sorted(p.stem for p in h.CORPUS.glob("[0-9][0-9]-*.yaml"))
_ONLY = [s for s in os.environ.get("SLUICE_GT_PAIRS", "").split(",") if s]
PAIRS = [p for p in ALL if not _ONLY or any(s in p for s in _ONLY)]


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Iterator[Any]:
    session = h.create_session(spark_jars)
    yield session
    session.stop()


@pytest.mark.parametrize("name", PAIRS)
def test_ground_truth(name: str, spark: Any, kafka: str, tmp_path: Path) -> None:
    path = h.CORPUS / f"{name}.yaml"
    outcome = h.run_pair(spark, kafka, path, tmp_path)
    known = (yaml.safe_load(path.read_text(encoding="utf-8"))["expect"] or {}).get("groundTruth")
    if known:
        assert outcome.classifier_bug == known, (
            f"{name}: documented as a known {known} classifier bug, but Spark forced in place gives "
            f"{outcome.spark} {outcome.error_class or ''} {outcome.detail}: update expect.groundTruth"
        )
        return
    bug = f"classifier bug ({outcome.classifier_bug}): " if outcome.classifier_bug else ""
    assert outcome.consistent, (
        f"{name}: {bug}verdict {outcome.verdict} but Spark forced in place gives {outcome.spark} "
        f"{outcome.error_class or ''} {outcome.detail}"
    )
