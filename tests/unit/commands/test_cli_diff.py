"""``sluice diff OLD.yaml NEW.yaml``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from sluice import cli
from sluice.commands import diff

from tests.support.upgrade_corpus import CORPUS


def main(argv: Sequence[str]) -> int:
    """Run ``sluice diff`` through its own parser (other subcommands are not needed here)."""
    parser = argparse.ArgumentParser(prog="sluice")
    diff.register(parser.add_subparsers(dest="command"))
    return diff.run(parser.parse_args(list(argv)))


def test_diff_is_a_cli_command() -> None:
    assert cli.COMMANDS["diff"] == "sluice.commands.diff"


def _write_pair(tmp_path: Path, name: str) -> tuple[str, str]:
    doc = yaml.safe_load((CORPUS / name).read_text())
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(doc["old"]))
    new.write_text(yaml.safe_dump(doc["new"]))
    return str(old), str(new)


def test_diff_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path, "12-group-by-same-type.yaml")
    assert main(["diff", old, new, "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"category", "decision", "reasons", "changes"}
    assert (data["category"], data["decision"]) == ("topology", "replace")
    change = next(c for c in data["changes"] if c["step"] == "aggregate-1")
    assert change == {
        **change,
        "category": "topology",
        "field": "keys",
        "old": ["customer"],
        "new": ["seller"],
    }


def test_diff_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path, "04-filter-stateless.yaml")
    assert main(["diff", old, new]) == 0
    out = capsys.readouterr().out
    assert "category: data-selection" in out and "decision: in-place" in out
    assert "filter-1" in out and "amount > 3" in out


def test_diff_reject_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path, "35-allow-replace-false.yaml")
    assert main(["diff", old, new, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decision"] == "reject"
    assert "allowReplace" in data["reasons"][0]


def test_diff_same_file_is_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, _ = _write_pair(tmp_path, "04-filter-stateless.yaml")
    assert main(["diff", old, old, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "none"


def test_diff_resources_only_is_transparent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, _ = _write_pair(tmp_path, "05-filter-before-aggregate.yaml")
    doc = yaml.safe_load(Path(old).read_text())
    doc["spec"]["resources"] = {"driver": {"limits": {"memory": "2Gi"}}}
    new = tmp_path / "resources.yaml"
    new.write_text(yaml.safe_dump(doc))
    assert main(["diff", old, str(new), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["category"], data["decision"]) == ("transparent", "in-place")
    assert data["changes"] == [
        {
            "category": "transparent",
            "step": "spec",
            "field": "resources.driver.limits.memory",
            "old": None,
            "new": "2Gi",
            "message": data["changes"][0]["message"],
        }
    ]
    assert "spec.resources.driver.limits.memory changed from none to '2Gi'" in data["reasons"][0]


def test_diff_compile_error_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path, "04-filter-stateless.yaml")
    doc = yaml.safe_load(Path(new).read_text())
    doc["spec"]["sql"] = "SELECT order_id,\n  nope FROM orders"
    Path(new).write_text(yaml.safe_dump(doc))
    assert main(["diff", old, new, "-o", "json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{new}: line 2, column 3: ")
    assert "nope" in captured.err


def test_diff_manifest_error_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path, "04-filter-stateless.yaml")
    Path(new).write_text(
        "kind: StreamingQuery\napiVersion: sluice.dev/v1alpha1\nmetadata: {name: q}\nspec: [1\n"
    )
    assert main(["diff", old, new]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{new}: line ")


def test_diff_missing_file_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, _ = _write_pair(tmp_path, "04-filter-stateless.yaml")
    assert main(["diff", old, str(tmp_path / "missing.yaml")]) == 1
    assert "missing.yaml" in capsys.readouterr().err



def test_diff_does_not_ask_about_an_avro_key_going_under_a_versioned_topics_subject(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A replace with backfill puts the avro key under ``<sink>-v<N>-key``, N unknown here: not asked, so
    no registry is needed; with hand-off the key stays under ``<sink>-key`` and is asked (no registry:
    the problem names the sink's keyFormat and that subject)."""
    monkeypatch.delenv("SLUICE_SCHEMA_REGISTRY_URL", raising=False)

    def manifest(sql: str, strategy: str, name: str) -> str:
        obj = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
               "metadata": {"name": "q", "namespace": "shop"},
               "spec": {"sources": [{"name": "orders", "topic": "orders",
                                     "schema": [{"name": "customer", "type": "string"},
                                                {"name": "amount", "type": "double"}]}],
                        "sql": sql, "sink": {"topic": "out", "key": ["customer"], "keyFormat": "avro",
                                             "outputMode": "update"},
                        "upgrade": {"replaceStrategy": strategy}}}
        path = tmp_path / name
        path.write_text(yaml.safe_dump(obj))
        return str(path)

    old_sql = "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer"
    new_sql = "SELECT cast(customer AS binary) AS customer, count(*) AS n FROM orders GROUP BY customer"
    assert main(["diff", manifest(old_sql, "backfill", "old.yaml"), manifest(new_sql, "backfill", "new.yaml"),
                 "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "replace"
    hand_off = [manifest(old_sql, "handOff", "old.yaml"), manifest(new_sql, "handOff", "new.yaml")]
    assert main(["diff", *hand_off]) == 1
    err = capsys.readouterr().err
    assert "spec.sink.keyFormat" in err and "subject 'out-key'" in err
