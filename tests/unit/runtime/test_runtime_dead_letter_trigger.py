"""How often a dead-letter query triggers (``sluice_runtime.pipeline.dead_letter_interval``)."""

from __future__ import annotations

import pytest
from sluice.core.plan import model
from sluice_runtime.pipeline import DEAD_LETTER_INTERVAL, dead_letter_interval

COLS = [model.FieldSpec(name="a", type="int")]


def sink(processing_time: str | None) -> model.KafkaSinkV1:
    return model.KafkaSinkV1(id="sink", inputs=["src"], schema=COLS, topic="o",
                             trigger=model.TriggerSpec(processing_time=processing_time))


@pytest.mark.parametrize("main", [None, "500 milliseconds", "1 second", "9 seconds"])
def test_at_most_every_ten_seconds(main: str | None) -> None:
    assert DEAD_LETTER_INTERVAL == "10 seconds"
    assert dead_letter_interval(sink(main)) == "10 seconds"


@pytest.mark.parametrize("main", ["10 seconds", "1 minute", "1 hour 30 minutes"])
def test_a_longer_sink_trigger_is_kept(main: str) -> None:
    assert dead_letter_interval(sink(main)) == main
