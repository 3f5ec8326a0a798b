"""`sluice plan` error output: one formatted line per problem, no tracebacks, no library noise."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from sluice.commands import plan

MANIFEST = """apiVersion: sluice.dev/v1alpha1
kind: StreamingQuery
metadata: {{name: q, namespace: default}}
spec:
  sources:
    - name: orders
      topic: orders
      schema:
        - {{name: order_id, type: string}}
  sql: {sql}
  sink: {{topic: out}}
"""


def run(path: Path) -> int:
    return plan.run(argparse.Namespace(file=str(path), output="json"))


@pytest.mark.parametrize(
    ("sql", "kind"), [("EXPLAIN SELECT order_id FROM orders", "an EXPLAIN"), ("SHOW TABLES", "a SHOW")]
)
def test_non_select_statements_print_only_the_formatted_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, sql: str, kind: str
) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(MANIFEST.format(sql=sql))
    with caplog.at_level(logging.DEBUG):
        assert run(path) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"{path}: line 1, column 1: only SELECT queries are supported, but the SQL is {kind} statement; "
        "the sink is declared in spec.sink"
    ]
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sqlglot")] == []


def test_a_file_that_is_not_utf8_is_a_formatted_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(MANIFEST.format(sql="SELECT 'caf\xe9' AS c FROM orders").encode("latin-1"))
    assert run(path) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{path}: cannot read the file: it is not UTF-8 text (invalid byte 0xe9")
    assert "Traceback" not in captured.err


def test_a_trailing_comment_after_the_semicolon_compiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(MANIFEST.format(sql='"SELECT order_id FROM orders; -- bye"'))
    assert run(path) == 0
    assert capsys.readouterr().err == ""
