"""Ground truth for the upgrade classifier against real Kafka and PySpark.

A representative subset of tests/corpus/upgrades runs here (each pair takes 15-40 s on 2 cores:
the old query, the forced in-place restart and, for replace verdicts, two fresh runs of the new
query). ``python bench/upgrade_ground_truth.py --write`` runs the whole corpus and regenerates
docs/upgrade-evidence.md and the corpus files' ``spark:`` blocks; SLUICE_GT_ALL=1 runs every pair
here too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import upgrade_harness as h

pytestmark = pytest.mark.integration

SUBSET = [
    "04-filter-stateless",  # in-place, stateless: old rows + new rows, exactly
    "05-filter-before-aggregate",  # in-place, stateful: state continues with the new filter
    "12-group-by-same-type",  # replace: Spark restarts silently with wrong counts
    "20-count-to-sum",  # replace: count -> sum(bigint) silently mixes buffers
    "21-avg-to-sum",  # replace: Spark refuses the state schema
    "19-join-time-condition",  # replace: designed input, a match lost to the old range's eviction
    "26-source-topic",  # replace: the new topic is read from earliest on top of the old state
    "31-output-mode",  # in-place: update -> append on windows, designed input and reference
]
ALL = sorted(p.stem for p in h.CORPUS.glob("[0-9][0-9]-*.yaml"))
PAIRS = ALL if os.environ.get("SLUICE_GT_ALL") else SUBSET


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Iterator[Any]:
    session = h.create_session(spark_jars)
    yield session
    session.stop()


@pytest.mark.parametrize("name", PAIRS)
def test_ground_truth(name: str, spark: Any, kafka: str, tmp_path: Path) -> None:
    path = h.CORPUS / f"{name}.yaml"
    outcome = h.run_pair(spark, kafka, path, tmp_path)
    assert outcome.consistent, (
        f"{name}: verdict {outcome.verdict} but Spark forced in place gives {outcome.spark} "
        f"{outcome.error_class or ''} {outcome.detail}"
    )
