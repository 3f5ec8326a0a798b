"""Check or regenerate the golden plan hashes of the corpora (``tests/corpus/plan_hashes.json``).

Every plan the corpora compile has a recorded hash: each valid manifest of the compile corpus
(``compile/valid/<name>``) and the old and new manifest of each pair of the upgrade corpus
(``upgrades/<name>/old``, ``upgrades/<name>/new``). ``python -m sluice_dev.plan_hashes`` exits 1
listing every difference; ``--write`` (``make plan-hashes``) records the current hashes.
``tests/unit/devtools/test_plan_hashes.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import yaml
from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.spec import QuerySpec

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "corpus"
GOLDEN = CORPUS / "plan_hashes.json"
COMMAND = "make plan-hashes"
#: shown on failure (and kept in the golden file)
EXPLANATION = (
    "A changed hash re-plans nothing that runs (a running query keeps the plan pinned in its status), "
    "but every change of a compiled plan must be deliberate: if it is, run `make plan-hashes` "
    "(.venv/bin/python -m sluice_dev.plan_hashes --write) and give the reason in the commit message."
)


def cases(corpus: Path = CORPUS) -> Iterator[tuple[str, QuerySpec]]:
    """Each corpus plan's case name and query, loaded as the corpus tests load them."""
    for path in sorted((corpus / "compile" / "valid").glob("*.yaml")):
        yield f"compile/valid/{path.stem}", parse_manifest(path.read_text()).spec
    for path in sorted((corpus / "upgrades").glob("[0-9][0-9]-*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for side in ("old", "new"):
            yield f"upgrades/{path.stem}/{side}", parse_manifest(yaml.safe_dump(doc[side])).spec


def current_hashes(corpus: Path = CORPUS) -> dict[str, str]:
    return {name: compile_query(spec).hash for name, spec in cases(corpus)}


def load_golden(path: Path = GOLDEN) -> dict[str, str]:
    if not path.exists():
        return {}
    plans: dict[str, str] = json.loads(path.read_text())["plans"]
    return plans


def render(hashes: Mapping[str, str]) -> str:
    doc = {"about": EXPLANATION, "plans": dict(sorted(hashes.items()))}
    return json.dumps(doc, indent=2) + "\n"


def differences(golden: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """One line per case whose hash changed, that the golden file lacks or that is gone."""
    lines = [f"changed: {name}: {golden[name]} -> {current[name]}"
             for name in sorted(golden.keys() & current.keys()) if golden[name] != current[name]]
    lines += [f"missing from the golden file: {name} ({current[name]})"
              for name in sorted(current.keys() - golden.keys())]
    lines += [f"in the golden file but not in the corpus: {name} ({golden[name]})"
              for name in sorted(golden.keys() - current.keys())]
    return lines


def failure_message(lines: Sequence[str], golden: Path = GOLDEN) -> str:
    return "\n".join([f"{len(lines)} corpus plan hash(es) differ from {golden.name}:", *lines, EXPLANATION])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice_dev.plan_hashes", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"record the current hashes in {GOLDEN.name}")
    args = parser.parse_args(argv)
    current = current_hashes()
    lines = differences(load_golden(), current)
    if args.write:
        GOLDEN.write_text(render(current))
        print("\n".join([*lines, f"wrote {len(current)} plan hashes to {GOLDEN}"]))
        return 0
    if lines:
        print(failure_message(lines), file=sys.stderr)
        return 1
    print(f"{len(current)} plan hashes unchanged")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
