"""The links between the repository's Markdown documents lead somewhere: every relative link to an
existing file, every #anchor to a heading of its target (slugged as GitHub slugs headings).
`python -m sluice_dev.doclinks` runs the same check (in `make lint`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice_dev import doclinks


def test_the_repository_docs_have_no_broken_link() -> None:
    problems, checked = doclinks.check()
    root = doclinks.ROOT
    assert root / "README.md" in checked and root / "docs" / "upgrades.md" in checked
    assert not problems, "\n".join(problem.render(root) for problem in problems)


@pytest.mark.parametrize(("heading", "expected"), [
    ("Carrying out a replace with backfill (blue/green)", "carrying-out-a-replace-with-backfill-bluegreen"),
    ("A driver's steady state", "a-drivers-steady-state"),
    ("Measured (`bench/bench_failover.py`)", "measured-benchbench_failoverpy"),
    ("`kubectl sluice plan sq/NAME [-o json|text]`", "kubectl-sluice-plan-sqname--o-jsontext"),
    ("transparent → in-place", "transparent--in-place"),
    ("What the ground truth found (Spark 4.3.0, `docs/upgrade-evidence.md`)",
     "what-the-ground-truth-found-spark-430-docsupgrade-evidencemd"),
    ("See [the runtime](runtime.md) **now**", "see-the-runtime-now"),
    ("Übergänge und Ziffern 2", "übergänge-und-ziffern-2"),
])
def test_slug_of_a_heading_is_githubs(heading: str, expected: str) -> None:
    assert doclinks.slug(doclinks.heading_text(heading)) == expected


def test_repeated_headings_are_suffixed_and_code_blocks_hold_no_heading() -> None:
    text = "# Title\n## Measured\n```bash\n# a comment, not a heading\n```\n## Measured ##\n### Measured\n"
    assert doclinks.anchors(text) == {"title", "measured", "measured-1", "measured-2"}


def test_links_in_code_are_not_links() -> None:
    text = ("see [a](a.md) and `[b](b.md)`, a span `running\n[c](c.md)` over a line\n"
            "```\n[d](d.md)\n```\n[e]: e.md\n")
    assert [(link.line, link.target) for link in doclinks.links(text)] == [(1, "a.md"), (6, "e.md")]


def _write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_broken_files_and_anchors_are_reported_with_their_line(tmp_path: Path) -> None:
    _write(tmp_path, "README.md", "# Readme\n\n[ok](docs/a.md#part-two) [web](https://example.invalid/x#y)\n"
                                  "[gone](docs/missing.md)\n")
    _write(tmp_path, "docs/a.md", "# A\n## Part two\n[up](../README.md#readme) [self](#part-two)\n"
                                  "[bad](#part-three)\n[other](b.md#nothing) [folder](../docs)\n")
    _write(tmp_path, "docs/b.md", "# B\n[extra](../notes/c.md)\n")
    _write(tmp_path, "notes/c.md", "# C\n[wrong](#c-1)\n")
    problems, checked = doclinks.check(tmp_path)
    assert [problem.render(tmp_path) for problem in problems] == [
        "README.md:4: broken link docs/missing.md: docs/missing.md does not exist",
        "docs/a.md:4: broken link #part-three: no heading with the anchor #part-three in docs/a.md",
        "docs/a.md:5: broken link b.md#nothing: no heading with the anchor #nothing in docs/b.md",
        "notes/c.md:2: broken link #c-1: no heading with the anchor #c-1 in notes/c.md",
    ]
    assert tmp_path / "notes" / "c.md" in checked, "a Markdown file the docs link to is checked too"


def test_main_exits_1_on_a_broken_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "README.md", "# R\n[x](#y)\n")
    assert doclinks.main(["--root", str(tmp_path)]) == 1
    assert "README.md:2: broken link #y" in capsys.readouterr().err
    _write(tmp_path, "README.md", "# R\n## Y\n[x](#y)\n")
    assert doclinks.main(["--root", str(tmp_path)]) == 0
