"""Compiling avro queries outside the operator (``sluice plan``, ``sluice diff``, ``kubectl sluice
diff``): the sources' latest schemas come from ``$SLUICE_SCHEMA_REGISTRY_URL``; without it, or with a
registry that does not answer, the problem names the source's format. (The real registry:
tests/integration/test_registry_operator.py.)"""

from __future__ import annotations

import socket

import pytest
from sluice.commands.registry import URL_ENV, compile_with_registry, latest_schemas
from sluice.core.errors import CompileError
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
