"""The contract of a plan step type, in one place: every type of the plan model's ``Step`` union has
every part it needs, and no part names a type the model does not have.

The parts: its descriptor (``sluice.core.plan.steptypes``: statefulness, Spark operators, lineage,
reset note, rendering), a classifier rule (``sluice.core.classify.steps.RULES``), a runtime builder
(``sluice_runtime.steps.REGISTRY``), a historical plan that uses it
(``tests/corpus/historical_plans/``) and a corpus manifest the compiler plans into it
(``tests/corpus/compile/valid/``). A type that lacks one fails here with the missing piece named.
"""

from __future__ import annotations

import json
from functools import cache

import pytest
from sluice.core.classify.steps import RULES
from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan import steptypes
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
def compiled() -> set[str]:
    return {step.type for path in (CORPUS / "compile" / "valid").glob("*.yaml")
            for step in compile_query(parse_manifest(path.read_text()).spec).steps}


@pytest.mark.parametrize("name", sorted(MODEL))
def test_every_step_type_has_every_part(name: str) -> None:
    missing = []
    found = steptypes.descriptor(name)
    if found is None:
        missing.append("a descriptor in operator/sluice/core/plan/steptypes.py (TYPES)")
    elif found.model is not MODEL[name]:
        missing.append(f"a descriptor of its own model (the descriptor names {found.model.__name__})")
    elif found.stateful and not (found.spark_operators and found.reset_note):
        missing.append("the Spark operators and the reset note of a stateful step in its descriptor")
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
