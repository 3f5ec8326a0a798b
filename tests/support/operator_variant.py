"""``sluice operator`` of a later build whose compiler plans the same SQL differently, for the
tests of what an operator upgrade does to running queries.

``python -m tests.support.operator_variant ARGS...`` runs the real operator command with ``ARGS``;
its compiler gives every source a rate limit of :data:`RATE_LIMIT` records per batch (as a new
default of a later compiler would): the same spec then compiles into another plan, which the
classifier calls ``transparent``.
"""

from __future__ import annotations

import sys
from typing import Any

RATE_LIMIT = 5000


def install() -> None:
    """Make the process's compiler the later build's."""
    import sluice.core.compiler as compiler

    original = compiler.compile_query

    def later_build(spec: Any, target: Any = None) -> Any:
        sources = [s.model_copy(update={"max_offsets_per_trigger": s.max_offsets_per_trigger or RATE_LIMIT})
                   for s in spec.sources]
        return original(spec.model_copy(update={"sources": sources}), target)

    compiler.compile_query = later_build  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    install()
    from sluice.cli import main as sluice

    return int(sluice(["operator", *argv]) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
