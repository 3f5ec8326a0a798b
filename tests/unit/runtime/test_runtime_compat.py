"""The runtime refuses a plan it cannot honour, naming both versions (before its JVM starts)."""

from __future__ import annotations

import json

import pytest
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.plan.model import PLAN_FORMAT_VERSION
from sluice.core.spec import QuerySpec
from sluice_runtime import compat

QUERY = QuerySpec.model_validate({
    "sources": [{"name": "s", "topic": "t", "schema": [{"name": "id", "type": "int"}]}],
    "sql": "SELECT id FROM s", "sink": {"topic": "out"}})


def plan_text(spark: str = "4.3.0", **overrides: object) -> str:
    data = json.loads(compile_query(QUERY, CompileTarget(spark)).to_json())
    data.update(overrides)
    return json.dumps(data)


def test_a_plan_of_the_installed_spark_line_runs() -> None:
    compat.check(plan_text("4.3.0"), installed="4.3.0")
    compat.check(plan_text("4.3.0"), installed="4.3.2")
    assert compat.installed_spark() == "4.3.0"  # the image's PySpark (pyproject pins it)


def test_a_plan_of_another_spark_line_is_refused_with_both_versions() -> None:
    with pytest.raises(compat.PlanIncompatible) as refused:
        compat.check(plan_text("4.4.0"), installed="4.3.0")
    assert refused.value.error_class == "PlanIncompatible"
    assert "4.4.0" in str(refused.value) and "4.3.0" in str(refused.value)


def test_a_plan_of_a_newer_format_is_refused_before_its_steps_are_read() -> None:
    text = plan_text(version=PLAN_FORMAT_VERSION + 1, steps=[{"type": "explodeV9", "id": "x"}])
    with pytest.raises(compat.PlanIncompatible) as refused:
        compat.check(text, installed="4.3.0")
    assert f"format version {PLAN_FORMAT_VERSION + 1}" in str(refused.value)


def test_what_is_not_a_plan_is_left_to_the_plan_loader() -> None:
    compat.check("not json", installed="4.3.0")
    compat.check("[]", installed="4.3.0")
    assert compat.refusal({"sparkVersion": "x"}, "4.3.0") is not None
