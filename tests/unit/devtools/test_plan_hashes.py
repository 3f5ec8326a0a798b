"""Golden plan hashes: every plan the corpora compile has the hash recorded in
tests/corpus/plan_hashes.json, so that any change of a compiled plan is a deliberate, reviewed one
(regenerate with `make plan-hashes` and give the reason in the commit message)."""

from __future__ import annotations

from sluice_dev import plan_hashes


def test_every_corpus_plan_has_its_golden_hash() -> None:
    current = plan_hashes.current_hashes()
    assert len(current) >= 40 + 2 * 30, "the corpora are read (compile/valid and the upgrade pairs)"
    lines = plan_hashes.differences(plan_hashes.load_golden(), current)
    assert not lines, plan_hashes.failure_message(lines)


def test_differences_name_changed_missing_and_extra_cases() -> None:
    golden = {"a": "1", "b": "2", "gone": "3"}
    current = {"a": "1", "b": "9", "new": "4"}
    assert plan_hashes.differences(golden, current) == [
        "changed: b: 2 -> 9",
        "missing from the golden file: new (4)",
        "in the golden file but not in the corpus: gone (3)",
    ]
    assert plan_hashes.differences(current, current) == []
    message = plan_hashes.failure_message(plan_hashes.differences(golden, current))
    assert "make plan-hashes" in message and "commit message" in message and "pinned" in message


def test_golden_file_is_rendered_as_written() -> None:
    text = plan_hashes.GOLDEN.read_text()
    assert text == plan_hashes.render(plan_hashes.load_golden()), "regenerate with `make plan-hashes`"
