"""The plan warm-up reads only the tail of each source partition (pure parts)."""

from __future__ import annotations

import json

import pytest
from sluice_runtime.warmup import starting_offsets


def test_starting_offsets_reads_the_last_records_of_every_partition() -> None:
    text = starting_offsets("orders", {1: (0, 500), 0: (40, 1000)}, 100)
    assert json.loads(text) == {"orders": {"0": 900, "1": 400}}


def test_starting_offsets_never_before_the_low_watermark() -> None:
    # a partition with fewer records than asked for (or truncated by retention) starts at its start
    assert json.loads(starting_offsets("t", {0: (70, 120), 1: (0, 0)}, 100)) == {"t": {"0": 70, "1": 0}}


def test_prepare_pipeline_refuses_an_unknown_warm_up_mode() -> None:
    from sluice_runtime.pipeline import prepare_pipeline

    with pytest.raises(ValueError, match="warm_up: 'hot' is not one of none, generic, plan"):
        prepare_pipeline(None, None, bootstrap="b", query_id="q", warm_up="hot")  # type: ignore[arg-type]
