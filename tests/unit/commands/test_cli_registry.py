"""Compiling avro queries outside the operator (``sluice plan``, ``sluice diff``, ``kubectl sluice
diff``): the sources' latest schemas come from ``$SLUICE_SCHEMA_REGISTRY_URL``; without it, or with a
registry that does not answer, the problem names the source's format. The diffs' check of an avro
sink's changed schema needs it the same way, the problem naming the sink's format or keyFormat. (The
real registry: tests/integration/test_registry_operator.py, test_diff_sink_registry.py.)"""

from __future__ import annotations

import socket

import pytest
from sluice.commands.registry import URL_ENV, compile_with_registry, latest_schemas, sink_refusal
from sluice.core.errors import CompileError
from sluice.core.formats.registry import NEW_KEY_SCHEMA, NEW_VALUE_SCHEMA
from sluice.core.plan.model import RegistrySchema
from sluice.core.spec import QuerySpec

AVRO = QuerySpec.model_validate({"sources": [{"name": "orders", "topic": "orders", "format": "avro"}],
                                 "sql": "SELECT id FROM orders", "sink": {"topic": "out"}})
JSON = QuerySpec.model_validate({"sources": [{"name": "o", "topic": "o",
                                              "schema": [{"name": "a", "type": "int"}]}],
                                 "sql": "SELECT a FROM o", "sink": {"topic": "out"}})


def test_json_queries_need_no_registry() -> None:
    assert latest_schemas(JSON, env={}) == {}
    assert compile_with_registry(JSON, env={}).hash


def test_an_avro_source_without_the_variable_names_its_format_and_the_variable() -> None:
    with pytest.raises(CompileError) as caught:
        compile_with_registry(AVRO, env={})
    [problem] = caught.value.problems
    assert problem.field == "spec.sources[0].format" and URL_ENV in problem.message


def test_a_registry_that_does_not_answer_is_a_problem_of_the_source() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(CompileError) as caught:
        latest_schemas(AVRO, env={URL_ENV: url})
    [problem] = caught.value.problems
    assert problem.field == "spec.sources[0].format"
    assert problem.message.startswith(f"the schema registry at {url}: the latest version of subject "
                                      "'orders-value'")


def test_an_avro_key_without_the_variable_names_its_key_format() -> None:
    keyed = QuerySpec.model_validate({"sources": [{"name": "o", "topic": "o", "keyFormat": "avro",
                                                   "schema": [{"name": "a", "type": "int"}]}],
                                      "sql": "SELECT a FROM o", "sink": {"topic": "out"}})
    with pytest.raises(CompileError) as caught:
        compile_with_registry(keyed, env={})
    [problem] = caught.value.problems
    assert problem.field == "spec.sources[0].keyFormat"
    assert "source subject 'o-key' is avro" in problem.message


def _sink_question(key: bool = False) -> list[tuple[RegistrySchema, str]]:
    subject, what = ("out-key", NEW_KEY_SCHEMA) if key else ("out-value", NEW_VALUE_SCHEMA)
    return [(RegistrySchema(subject=subject, schema_='{"type": "record", "name": "R", "fields": []}'), what)]


def test_nothing_to_ask_about_the_sink_needs_no_registry() -> None:
    assert sink_refusal([], env={}) is None


def test_a_changed_sink_schema_without_the_variable_names_the_sinks_format_and_the_variable() -> None:
    with pytest.raises(CompileError) as caught:
        sink_refusal(_sink_question() + _sink_question(key=True), env={})
    value, key = caught.value.problems
    assert value.field == "spec.sink.format" and key.field == "spec.sink.keyFormat"
    assert value.message == ("the sink's new Avro schema goes under subject 'out-value': set "
                             f"{URL_ENV} to the schema registry's base URL to check its compatibility here")


def test_a_registry_that_does_not_answer_about_the_sink_is_a_problem_of_the_sink() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(CompileError) as caught:
        sink_refusal(_sink_question(key=True), env={URL_ENV: url})
    [problem] = caught.value.problems
    assert problem.field == "spec.sink.keyFormat"
    assert problem.message.startswith(f"the schema registry at {url}: the compatibility of the sink schema "
                                      "with subject 'out-key'")
