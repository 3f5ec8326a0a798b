"""``sluice run``: invalid manifests exit 1 with FILE: line L, column C: message; the runtime
command line it builds; SQL positions translated into manifest positions."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from sluice.commands import run as run_cmd

MANIFEST = """\
apiVersion: sluice.dev/v1alpha1
kind: StreamingQuery
metadata: {name: q, namespace: shop}
spec:
  sources:
    - name: orders
      topic: orders
      schema:
        - {name: order_id, type: string}
        - {name: amount, type: double}
  sql: |
    SELECT order_id, amount
    FROM orderz WHERE amount > 1
  sink:
    topic: out
"""


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["run", *argv])


def test_invalid_sql_points_into_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "q.yaml"
    f.write_text(MANIFEST)
    assert run_cmd.run(_args(str(f), "--bootstrap", "x:1", "--checkpoint", str(tmp_path / "ck"))) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{f}: line 13, column 10: ") and "orderz" in err
    assert MANIFEST.splitlines()[12][9:15] == "orderz"


def test_invalid_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "q.yaml"
    f.write_text("apiVersion: [\n")
    assert run_cmd.run(_args(str(f), "--bootstrap", "x:1", "--checkpoint", "ck")) == 1
    assert capsys.readouterr().err.startswith(f"{f}: line ")


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cmd.run(_args(str(tmp_path / "nope.yaml"), "--bootstrap", "x:1", "--checkpoint", "ck")) == 1
    assert "cannot read" in capsys.readouterr().err


def test_single_line_sql_position() -> None:
    text = 'kind: StreamingQuery\nspec:\n  sql: "SELECT a FROM t"\n'
    assert run_cmd.sql_position_in_file(text, 1, 8) == (3, 16)
    assert text.splitlines()[2][15] == "a"


def test_runtime_command() -> None:
    args = _args(
        "q.yaml",
        "--bootstrap",
        "h:1",
        "--checkpoint",
        "/ck",
        "--available-now",
        "--conf",
        "a=b",
        "--jars",
        "x.jar",
    )
    cmd = run_cmd.runtime_command(args, "/tmp/plan.json", "local-shop-q")
    assert cmd[1:4] == ["-m", "sluice_runtime.cli", "run"]
    joined = " ".join(cmd)
    for part in (
        "--plan /tmp/plan.json",
        "--checkpoint /ck",
        "--bootstrap h:1",
        "--query-id local-shop-q",
        "--available-now",
        "--conf a=b",
        "--jars x.jar",
        "--http-addr off",
    ):
        assert part in joined


def test_control_plane_does_not_import_pyspark() -> None:
    import subprocess
    import sys

    code = "import sys, sluice.commands.run, sluice.cli; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_without_jars_the_runtime_resolves_the_connector() -> None:
    """No ``--jars``, no ``SLUICE_JARS``: the runtime lets Spark resolve the Kafka connector
    (``--resolve-connector``; the coordinates are the runtime's business, see
    ``tests/unit/runtime/test_runtime_kafka_security.py``)."""
    base = ("q.yaml", "--bootstrap", "h:1", "--checkpoint", "/ck")
    assert "--resolve-connector" in run_cmd.runtime_command(_args(*base), "/p.json", "q", env={})
    for argv, env in (
        ((*base, "--jars", "x.jar"), {}),
        (base, {"SLUICE_JARS": "/cache/a.jar"}),
        ((*base, "--conf", "spark.jars.packages=g:a:1"), {}),
        ((*base, "--conf", "spark.jars=/x.jar"), {}),
    ):
        assert "--resolve-connector" not in run_cmd.runtime_command(_args(*argv), "/p.json", "q", env=env)
