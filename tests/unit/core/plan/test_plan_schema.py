"""The committed JSON Schema of the plan guards compatibility of every later model change."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sluice.core.plan.schema_compat import current_schema, incompatibilities, render_schema
from sluice_dev.plan_schema import SCHEMA_FILE, main

REGENERATE = "python -m sluice_dev.plan_schema --write"


def committed() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


def test_models_stay_compatible_with_the_committed_schema() -> None:
    problems = incompatibilities(committed(), current_schema())
    assert not problems, (
        "the plan models changed incompatibly (old plans would no longer load); give the step a new "
        "version (e.g. filterV2) instead:\n" + "\n".join(problems)
    )


def test_committed_schema_is_up_to_date() -> None:
    assert render_schema(current_schema()) == SCHEMA_FILE.read_text(), (
        f"the plan schema changed compatibly; regenerate the committed file: {REGENERATE}"
    )


def _schema() -> dict[str, Any]:
    return copy.deepcopy(committed())


def test_identical_schemas_are_compatible() -> None:
    assert incompatibilities(_schema(), _schema()) == []


def test_adding_an_optional_property_is_compatible() -> None:
    new = _schema()
    new["$defs"]["FilterV1"]["properties"]["note"] = {"type": "string", "default": ""}
    assert incompatibilities(_schema(), new) == []


def test_adding_a_step_type_is_compatible() -> None:
    new = _schema()
    new["$defs"]["FilterV2"] = copy.deepcopy(new["$defs"]["FilterV1"])
    steps = new["properties"]["steps"]["items"]
    steps["oneOf"].append({"$ref": "#/$defs/FilterV2"})
    steps["discriminator"]["mapping"]["filterV2"] = "#/$defs/FilterV2"
    assert incompatibilities(_schema(), new) == []


def test_removed_property_is_incompatible() -> None:
    new = _schema()
    del new["$defs"]["FilterV1"]["properties"]["condition"]
    new["$defs"]["FilterV1"]["required"].remove("condition")
    assert any("condition: property was removed" in p for p in incompatibilities(_schema(), new))


def test_changed_type_is_incompatible() -> None:
    new = _schema()
    new["$defs"]["FilterV1"]["properties"]["condition"]["type"] = "integer"
    assert any("condition: type changed" in p for p in incompatibilities(_schema(), new))


def test_newly_required_property_is_incompatible() -> None:
    new = _schema()
    new["$defs"]["FilterV1"]["properties"]["note"] = {"type": "string"}
    new["$defs"]["FilterV1"]["required"].append("note")
    assert any("note: property is newly required" in p for p in incompatibilities(_schema(), new))


def test_removed_enum_value_is_incompatible() -> None:
    new = _schema()
    fn = new["$defs"]["AggregateCall"]["properties"]["function"]
    fn["enum"].remove("approx_count_distinct")
    assert any("enum values removed" in p for p in incompatibilities(_schema(), new))


def test_removed_step_type_is_incompatible() -> None:
    new = _schema()
    del new["properties"]["steps"]["items"]["discriminator"]["mapping"]["unionV1"]
    assert any("step type 'unionV1' was removed" in p for p in incompatibilities(_schema(), new))


# -- value constraints: tightening is incompatible, loosening is compatible ---------------------------


def _with(constraints: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = dict(base or {"type": "string"})
    schema.update({k: v for k, v in constraints.items() if v is not None})
    return {"type": "object", "properties": {"value": schema}}


@pytest.mark.parametrize(
    ("key", "old", "new", "compatible", "base"),
    [
        ("minLength", None, 1, False, "string"),
        ("minLength", 1, 2, False, "string"),
        ("minLength", 2, 1, True, "string"),
        ("minLength", 2, None, True, "string"),
        ("maxLength", None, 64, False, "string"),
        ("maxLength", 64, 32, False, "string"),
        ("maxLength", 32, 64, True, "string"),
        ("maxLength", 32, None, True, "string"),
        ("pattern", None, "^[a-z]+$", False, "string"),
        ("pattern", "^[a-z]+$", "^[a-z0-9]+$", False, "string"),
        ("pattern", "^[a-z]+$", "^[a-z]+$", True, "string"),
        ("pattern", "^[a-z]+$", None, True, "string"),
        ("minItems", None, 1, False, "array"),
        ("minItems", 1, 2, False, "array"),
        ("minItems", 2, 0, True, "array"),
        ("maxItems", None, 10, False, "array"),
        ("maxItems", 10, 5, False, "array"),
        ("maxItems", 5, 10, True, "array"),
        ("minimum", None, 0, False, "integer"),
        ("minimum", 0, 1, False, "integer"),
        ("minimum", 1, 0, True, "integer"),
        ("maximum", None, 100, False, "integer"),
        ("maximum", 100, 99, False, "integer"),
        ("maximum", 99, 100, True, "integer"),
        ("exclusiveMinimum", 0, 1, False, "number"),
        ("exclusiveMaximum", 10, 5, False, "number"),
        ("multipleOf", 2, 4, False, "integer"),
        ("multipleOf", 4, 2, True, "integer"),
        ("uniqueItems", None, True, False, "array"),
        ("uniqueItems", True, None, True, "array"),
    ],
)
def test_value_constraints(key: str, old: Any, new: Any, compatible: bool, base: str) -> None:
    problems = incompatibilities(_with({key: old}, {"type": base}), _with({key: new}, {"type": base}))
    assert (problems == []) is compatible, problems
    if not compatible:
        assert any(p.startswith("$.value:") for p in problems), problems


def test_enum_narrowing_is_incompatible_and_widening_is_compatible() -> None:
    old = _with({"enum": ["a", "b"]})
    assert any("enum values removed: ['b']" in p for p in incompatibilities(old, _with({"enum": ["a"]})))
    assert incompatibilities(old, _with({"enum": ["a", "b", "c"]})) == []
    assert any("values restricted" in p for p in incompatibilities(_with({}), _with({"enum": ["a"]})))


def test_tightened_constraint_in_the_real_plan_schema() -> None:
    new = _schema()
    new["$defs"]["StreamStreamJoinV1"]["properties"]["keys"]["minItems"] = 2
    new["$defs"]["FilterV1"]["properties"]["condition"]["maxLength"] = 10_000
    problems = incompatibilities(_schema(), new)
    assert any("keys: minItems tightened from 1 to 2" in p for p in problems), problems
    assert any("condition: maxLength tightened from none to 10000" in p for p in problems), problems
    loosened = _schema()
    del loosened["properties"]["steps"]["minItems"]
    assert incompatibilities(_schema(), loosened) == []


def test_plan_schema_command_finds_the_schema_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert capsys.readouterr().out == "plan schema unchanged\n"
