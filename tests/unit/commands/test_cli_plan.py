"""`sluice plan FILE.yaml [--output json|text]`, run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sluice import cli
from sluice.cli import main

from tests.support import paths

REPO = paths.REPO
EXAMPLE = REPO / "examples" / "revenue.yaml"
CORPUS = REPO / "tests" / "corpus" / "compile"


@pytest.fixture(autouse=True)
def only_plan_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test `plan` on its own: other subcommands are built by other work in progress."""
    monkeypatch.setattr(cli, "COMMANDS", {"plan": cli.COMMANDS["plan"]})


def test_json_output_is_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLE)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    plan = json.loads(captured.out)
    assert {"version", "steps", "outputSchema", "hash"} <= set(plan)
    assert [s["type"] for s in plan["steps"]] == [
        "kafkaSourceV1",
        "watermarkV1",
        "windowAggregateV1",
        "kafkaSinkV1",
    ]
    assert plan["outputSchema"] == [
        {"name": "w", "type": "struct<start:timestamp,end:timestamp>", "qualifier": None},
        {"name": "revenue", "type": "double", "qualifier": None},
    ]
    assert plan["steps"][-1]["key"] == ["w"]


def test_text_output_is_a_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLE), "--output", "text"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("plan v1 for Spark")
    assert "kafkaSinkV1 [sink]" in out
    assert "└─ windowAggregateV1 [window-aggregate-1]" in out
    assert "revenue = SUM(amount)" in out


def test_sql_error_names_file_line_and_column(capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / "invalid" / "unknown_column.yaml"
    assert main(["plan", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        f"{path}: line 1, column 18: column 'amout' does not exist in source 'orders'; did you mean 'amount'?"
    )


def test_spec_error_names_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / "invalid" / "sink_key_missing.yaml"
    assert main(["plan", str(path), "-o", "text"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{path}: spec.sink.key[0]: sink key column 'customer_id'")


def test_invalid_yaml_is_reported_with_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: sluice.dev/v1alpha1\nkind: [StreamingQuery\n")
    assert main(["plan", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{path}: line ")


def test_manifest_error_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nosql.yaml"
    text = EXAMPLE.read_text().replace("  sql: |", "  sqlx: |")
    path.write_text(text)
    assert main(["plan", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}: spec.sql" in captured.err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(tmp_path / "nope.yaml")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "nope.yaml: cannot read the file" in captured.err


def test_several_problems_each_on_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        EXAMPLE.read_text()
        .replace("type: double", "type: dubble")
        .replace("eventTime: {column: ts,", "eventTime: {column: tss,")
    )
    path = tmp_path / "two.yaml"
    path.write_text(text)
    assert main(["plan", str(path)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        f"{path}: spec.sources[0].schema[1].type: column 'amount': unknown type 'dubble'"
    )
    assert lines[1].startswith(f"{path}: spec.sources[0].eventTime.column: event-time column 'tss'")
