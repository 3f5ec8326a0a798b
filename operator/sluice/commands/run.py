"""``sluice run FILE.yaml --bootstrap HOST:PORT --checkpoint DIR [--available-now]``.

Compiles the manifest in this process, writes the plan to a temporary file and runs the Sluice
runtime (``python -m sluice_runtime.cli run``) as a child process: the control plane never imports
PySpark. With ``--available-now`` the runtime processes what is in the source topics and exits 0.
Without ``--jars`` (nor ``SLUICE_JARS``, nor ``--conf spark.jars...``) the runtime is started with
``--resolve-connector``: unless PySpark ships Spark's Kafka connector, Spark resolves it from Maven
Central (``spark.jars.packages``, the version matching the installed PySpark).
An invalid manifest exits 1 with ``FILE: line L, column C: message`` on stderr; SQL positions are
translated into positions in FILE.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="compile a StreamingQuery manifest and run it locally against Kafka",
        description="Compile a StreamingQuery manifest and run it with the Sluice runtime on this "
        "machine (local Spark): the fastest way to try a query against a real topic.",
    )
    parser.add_argument("file", metavar="FILE.yaml", help="StreamingQuery manifest")
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers HOST:PORT")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then exit")
    parser.add_argument("--master", default=None, help="Spark master (default local[2])")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="Spark setting")
    parser.add_argument(
        "--jars", default=None,
        help="comma-separated jars (Kafka connector; default: $SLUICE_JARS, else Spark resolves it)",
    )
    parser.add_argument("--http-addr", default="off", help="runtime HTTP endpoint (default off)")
    parser.add_argument("--query-id", default=None, help="query identity (default local-NAMESPACE-NAME)")


def sql_position_in_file(text: str, sql_line: int, sql_column: int | None) -> tuple[int, int | None] | None:
    """Translate a 1-based (line, column) inside ``spec.sql`` into the manifest file."""
    import yaml

    try:
        for doc in yaml.compose_all(text):
            if not isinstance(doc, yaml.MappingNode):
                continue
            kind = next((v.value for k, v in doc.value if k.value == "kind"), None)
            if kind != "StreamingQuery":
                continue
            spec = next((v for k, v in doc.value if k.value == "spec"), None)
            if not isinstance(spec, yaml.MappingNode):
                return None
            node = next((v for k, v in spec.value if k.value == "sql"), None)
            if not isinstance(node, yaml.ScalarNode):
                return None
            mark = node.start_mark
            if node.style in ("|", ">"):
                lines = text.splitlines()
                first = mark.line + 1  # 0-based index of the first content line
                while first < len(lines) and not lines[first].strip():
                    first += 1
                indent = len(lines[first]) - len(lines[first].lstrip(" ")) if first < len(lines) else 0
                file_line = mark.line + 1 + sql_line  # 1-based
                column = None if sql_column is None else indent + sql_column
                return file_line, column
            if sql_line == 1:
                offset = 1 if node.style in ("'", '"') else 0
                column = None if sql_column is None else mark.column + offset + sql_column
                return mark.line + 1, column
            return None
    except yaml.YAMLError:
        return None
    return None


def render_problem(problem: Any, path: str, text: str) -> str:
    from sluice.core.errors import Problem

    if problem.line is not None and problem.field in (None, "spec.sql"):
        pos = sql_position_in_file(text, problem.line, problem.column)
        if pos is not None and (problem.field == "spec.sql" or _is_sql_problem(problem)):
            problem = Problem(problem.message, field=problem.field, line=pos[0], column=pos[1])
    return str(problem.render(path))


def _is_sql_problem(problem: Any) -> bool:
    return not str(problem.message).startswith("invalid YAML")


def compile_file(path: str) -> tuple[Any, Any]:
    """(plan, manifest); raises SluiceError (with the file text attached) or OSError."""
    from sluice.core.compiler import compile_query
    from sluice.core.manifest import parse_manifest

    text = Path(path).read_text(encoding="utf-8")
    manifest = parse_manifest(text)
    return compile_query(manifest.spec), manifest


def provides_jars(args: argparse.Namespace, env: Mapping[str, str]) -> bool:
    """Whether the caller put the Kafka connector on Spark's classpath (``--jars``, ``SLUICE_JARS``
    or a ``spark.jars``/``spark.jars.packages`` setting)."""
    if args.jars or env.get("SLUICE_JARS", "").strip():
        return True
    keys = {item.partition("=")[0].strip() for item in args.conf}
    return bool(keys & {"spark.jars", "spark.jars.packages"})


def runtime_command(
    args: argparse.Namespace, plan_path: str, query_id: str, env: Mapping[str, str] | None = None
) -> list[str]:
    env = os.environ if env is None else env
    cmd = [
        sys.executable,
        "-m",
        "sluice_runtime.cli",
        "run",
        "--plan",
        plan_path,
        "--checkpoint",
        args.checkpoint,
        "--bootstrap",
        args.bootstrap,
        "--query-id",
        query_id,
        "--http-addr",
        args.http_addr,
    ]
    if args.available_now:
        cmd.append("--available-now")
    if args.master:
        cmd += ["--master", args.master]
    if args.jars:
        cmd += ["--jars", args.jars]
    if not provides_jars(args, env):
        cmd.append("--resolve-connector")
    for item in args.conf:
        cmd += ["--conf", item]
    return cmd


def run(args: argparse.Namespace) -> int:
    from sluice.core.errors import SluiceError

    try:
        plan, manifest = compile_file(args.file)
    except SluiceError as exc:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except OSError:
            text = ""
        for problem in exc.problems:
            print(render_problem(problem, args.file, text), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{args.file}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 1
    query_id = args.query_id or f"local-{manifest.namespace}-{manifest.name}"
    with tempfile.TemporaryDirectory(prefix="sluice-run-") as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        Path(plan_path).write_text(plan.to_json(), encoding="utf-8")
        # Own session: Ctrl-C reaches only this process, which asks the runtime to drain; the
        # terminal's SIGINT would otherwise also hit the Spark JVM and cut the batch in flight.
        child = subprocess.Popen(runtime_command(args, plan_path, query_id), start_new_session=True)
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGTERM)  # the runtime drains, then exits
            return child.wait()


def main(argv: list[str] | None = None) -> int:
    """``sluice run`` on its own (``python -m sluice.commands.run FILE.yaml ...``)."""
    parser = argparse.ArgumentParser(prog="sluice")
    register(parser.add_subparsers(dest="command"))
    return run(parser.parse_args(["run", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
