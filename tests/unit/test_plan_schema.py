"""The committed JSON Schema of the plan guards compatibility of every later model change."""

from __future__ import annotations

import copy
import json
from typing import Any

from sluice.core.plan.schema_compat import (
    SCHEMA_FILE,
    current_schema,
    incompatibilities,
    render_schema,
)

REGENERATE = "python -m sluice.core.plan.schema_compat --write"


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
