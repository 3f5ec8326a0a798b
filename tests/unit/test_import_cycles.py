"""No import cycles between the project's modules, function-level and TYPE_CHECKING imports included.

grimp (the graph library under import-linter) reads every import statement, wherever it sits, so a
cycle hidden behind an import inside a function still shows here.
"""

from __future__ import annotations

from itertools import pairwise

import grimp
import pytest

PACKAGES = ("sluice", "sluice_runtime", "sluice_dev")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Groups of modules that import each other (strongly connected components of two or more)."""
    modules = set(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module) & modules):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return sorted(cycles)


def describe(graph: grimp.ImportGraph, group: list[str]) -> str:
    """One import chain round the cycle, with the line of each import."""
    first, second = group[0], group[1]
    there = graph.find_shortest_chain(first, second) or ()
    back = graph.find_shortest_chain(second, first) or ()
    chain = [*there, *back[1:]]
    lines = []
    for importer, imported in pairwise(chain):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = ", ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
        lines.append(f"  {importer} -> {imported} ({where})")
    return f"{' <-> '.join(group)}\n" + "\n".join(lines)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package: str) -> None:
    graph = grimp.build_graph(package, cache_dir=None)
    cycles = import_cycles(graph)
    assert not cycles, "modules import each other:\n" + "\n".join(describe(graph, g) for g in cycles)


def test_a_cycle_through_a_function_level_import_is_found() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=3, line_contents="from pkg import b")
    graph.add_import(importer="pkg.b", imported="pkg.c", line_number=4, line_contents="from pkg import c")
    graph.add_import(importer="pkg.c", imported="pkg.a", line_number=9, line_contents="    from pkg import a")
    graph.add_import(importer="pkg.c", imported="pkg.d", line_number=5, line_contents="from pkg import d")
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert "pkg.c -> pkg.a (line 9:     from pkg import a)" in describe(graph, ["pkg.a", "pkg.b", "pkg.c"])
