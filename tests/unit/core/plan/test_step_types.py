"""The contract of a plan step type, in one place: every type of the plan model's ``Step`` union has
every part it needs, and no part names a type the model does not have.

The parts: its descriptor (``sluice.core.plan.steptypes``: statefulness, Spark operators, lineage,
reset note, rendering, and for a stateful type its part of the state signature the checkpoint
backstop records and compares), a classifier rule (``sluice.core.classify.steps.RULES``), a
runtime builder (``sluice_runtime.steps.REGISTRY``), a historical plan that uses it
(``tests/corpus/historical_plans/``) and a corpus manifest the compiler plans into it
(``tests/corpus/compile/valid/``). A type that lacks one fails here with the missing piece named.
"""

from __future__ import annotations

import json
from functools import cache

import pytest
from sluice.core.classify.backstop import state_signature
from sluice.core.classify.steps import RULES
from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan import steptypes
from sluice.core.plan.model import Plan
from sluice.core.plan.render import render_text
from sluice_runtime.steps import REGISTRY as BUILDERS

from tests.support import paths

CORPUS = paths.CORPUS
MODEL = steptypes.model_types()


@cache
def historical() -> set[str]:
    return {step["type"] for path in (CORPUS / "historical_plans").glob("*.json")
            for step in json.loads(path.read_text())["steps"]}


@cache
def corpus_plans() -> tuple[tuple[str, Plan], ...]:
    return tuple((path.name, compile_query(parse_manifest(path.read_text()).spec))
                 for path in sorted((CORPUS / "compile" / "valid").glob("*.yaml")))


@cache
def compiled() -> set[str]:
    return {step.type for _, plan in corpus_plans() for step in plan.steps}


@pytest.mark.parametrize("name", sorted(MODEL))
def test_every_step_type_has_every_part(name: str) -> None:
    missing = []
    found = steptypes.descriptor(name)
    if found is None:
        missing.append("a descriptor in operator/sluice/core/plan/steptypes.py (TYPES)")
    elif found.model is not MODEL[name]:
        missing.append(f"a descriptor of its own model (the descriptor names {found.model.__name__})")
    elif found.stateful:
        parts = {"the Spark operators (spark_operators)": found.spark_operators,
                 "the reset note (reset_note)": found.reset_note,
                 "the state signature part the checkpoint backstop compares (state)": found.state}
        missing += [f"{part} in its descriptor (it is stateful)" for part, value in parts.items()
                    if not value]
    if name not in RULES:
        missing.append("a classifier rule in operator/sluice/core/classify/steps.py (RULES)")
    if name not in BUILDERS:
        missing.append("a runtime builder in runtime-image/sluice_runtime/steps/ (REGISTRY)")
    if name not in historical():
        missing.append("a historical plan using it in tests/corpus/historical_plans/")
    if name not in compiled():
        missing.append("a manifest the compiler plans into it in tests/corpus/compile/valid/")
    assert not missing, f"step type {name} lacks: " + "; ".join(missing)


def test_no_part_names_a_type_the_model_does_not_have() -> None:
    assert set(steptypes.REGISTRY) == set(MODEL)
    assert set(RULES) == set(MODEL)
    assert set(BUILDERS) == set(MODEL)
    assert historical() <= set(MODEL)


def test_every_corpus_plan_renders_every_step_with_its_descriptor() -> None:
    for path in sorted((CORPUS / "compile" / "valid").glob("*.yaml")):
        plan = compile_query(parse_manifest(path.read_text()).spec)
        text = render_text(plan)
        for step in plan.steps:
            assert f"{step.type} [{step.id}]" in text, (path.name, step.id)
            for line in steptypes.REGISTRY[step.type].details(step):
                assert line in text, (path.name, step.id, line)


def test_every_stateful_step_of_the_corpus_has_its_state_in_the_signature() -> None:
    """The checkpoint backstop's signature has an entry, with the descriptor's part, for every
    stateful step of every corpus plan (and for no other step)."""
    seen: set[str] = set()
    for name, plan in corpus_plans():
        steps = state_signature(plan)["steps"]
        stateful = [s for s in plan.steps if s.type in steptypes.STATEFUL]
        assert sorted(steps) == sorted(s.id for s in stateful), name
        for step in stateful:
            seen.add(step.type)
            entry = steps[step.id]
            assert entry["type"] == step.type and set(entry) > {"type"}, (name, step.id)
    assert seen == steptypes.STATEFUL
