"""Every annotated pair of the upgrade corpus gets the expected verdict and reasons."""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice.core.classify import classify

from tests.support.upgrade_corpus import load, pair_files

CATEGORIES = {
    "none",
    "transparent",
    "data-selection",
    "schema-evolution",
    "topology",
    "source-modifying",
    "unsupported",
}


def test_corpus_is_large_enough_and_covers_every_decision() -> None:
    pairs = [load(p) for p in pair_files()]
    assert len(pairs) >= 30
    assert {p.expect["decision"] for p in pairs} >= {"none", "in-place", "replace", "reject"}
    assert {p.expect["category"] for p in pairs} >= CATEGORIES - {"unsupported"}
    for p in pairs:
        assert p.doc.get("description"), p.name
        assert p.expect["reasonContains"], p.name


@pytest.mark.parametrize("path", pair_files(), ids=lambda p: p.stem)
def test_corpus_verdict(path: Path) -> None:
    pair = load(path)
    old, new = pair.plans()
    decision = classify(old, new, pair.new.upgrade)
    expect = pair.expect
    assert (decision.category, decision.decision) == (expect["category"], expect["decision"]), (
        decision.reasons
    )
    text = "\n".join(decision.reasons).lower()
    for needle in expect["reasonContains"]:
        assert needle.lower() in text, (needle, decision.reasons)
    # every change names its step and field, and its message names the step and the old/new values
    for change in decision.changes:
        assert change.step and change.field
        if change.step not in ("settings", "plan"):
            assert change.step in change.message, change
        for value in (change.old, change.new):
            if isinstance(value, str):
                assert value in change.message, (value, change.message)
    # the most severe change decides
    if decision.changes:
        from sluice.core.classify.model import severity

        assert max(severity(c.category) for c in decision.changes) == severity(decision.category)
    # classifying a plan against itself is always a no-op
    assert classify(new, new, pair.new.upgrade).decision == "none"
