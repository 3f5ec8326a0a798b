"""The annotated compile corpus: valid manifests compile to the expected plan shape, invalid ones fail
with the expected message at the expected place.

Annotations are YAML comments at the top of each file:

- valid: ``# expect-steps: kafkaSourceV1, watermarkV1, ...`` (step types in order) and/or
  ``# expect-output: name type, name type`` (the plan's output schema);
- invalid: ``# expect-error: line L, column C: message fragment`` (or ``FIELD.PATH: fragment``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice.core.compiler import compile_query
from sluice.core.errors import CompileError, SluiceError
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan

from tests.support import paths

CORPUS = paths.CORPUS / "compile"
VALID = sorted((CORPUS / "valid").glob("*.yaml"))
INVALID = sorted((CORPUS / "invalid").glob("*.yaml"))


def annotations(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("# expect-"):
            key, _, value = line[2:].partition(":")
            found[key.strip()] = value.strip()
    return found


def test_corpus_is_big_enough() -> None:
    assert len(VALID) >= 40
    assert len(INVALID) >= 30


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_query_compiles_to_expected_shape(path: Path) -> None:
    expect = annotations(path)
    assert "expect-steps" in expect or "expect-output" in expect, f"{path.name} has no expectation"
    plan = compile_query(parse_manifest(path.read_text()).spec)
    if "expect-steps" in expect:
        assert ", ".join(s.type for s in plan.steps) == expect["expect-steps"]
    if "expect-output" in expect:
        assert ", ".join(f"{f.name} {f.type}" for f in plan.output_schema) == expect["expect-output"]
    # invariants every plan keeps
    assert plan.hash == plan.compute_hash()
    assert plan.steps[-1].type == "kafkaSinkV1"
    assert [s.type for s in plan.steps].count("kafkaSinkV1") == 1
    ids = [s.id for s in plan.steps]
    assert len(ids) == len(set(ids))
    seen: set[str] = set()
    for step in plan.steps:
        assert all(i in seen for i in step.inputs), f"{step.id} reads a step that comes later"
        seen.add(step.id)
        if step.type == "watermarkV1":
            assert step.inputs[0].startswith("source-")
    assert Plan.from_json(plan.to_json()) == plan
    assert compile_query(parse_manifest(path.read_text()).spec).hash == plan.hash  # deterministic


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_query_is_refused_clearly(path: Path) -> None:
    expect = annotations(path)["expect-error"]
    with pytest.raises(SluiceError) as info:
        compile_query(parse_manifest(path.read_text()).spec)
    assert isinstance(info.value, CompileError)
    problem = info.value.problems[0]
    location = f"line {problem.line}, column {problem.column}" if problem.line is not None else problem.field
    want_location, _, fragment = expect.partition(": ")
    assert location == want_location, problem.render()
    assert fragment in problem.message
    assert problem.field, "every problem names a manifest field"
    if problem.field == "spec.sql":
        assert problem.line is not None and problem.column is not None, "every SQL problem is located"
