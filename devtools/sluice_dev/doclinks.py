"""Check the links between the repository's Markdown documents.

Every relative link in ``README.md``, ``docs/*.md`` and any other Markdown file of the repository
they link to must point to a file or folder that exists, and every ``#anchor`` (in the same file
or in another ``.md``) must name one of its target's headings, slugged as GitHub slugs them: the
heading's text lower-cased, every character that is not a letter, a mark, a digit, ``_``, ``-`` or
a space removed, spaces turned into ``-``, and a repeated slug suffixed ``-1``, ``-2``, ...
External links (a scheme such as ``https:`` or ``mailto:``) are not fetched. Links inside code
(fenced blocks and inline code spans) are not links.

``python -m sluice_dev.doclinks`` (from the repository root; ``make lint`` runs it) prints
``file:line: broken link TARGET: why`` for each problem and exits 1, else a count and 0.
``tests/unit/devtools/test_doc_links.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
#: an inline code span; it may run over line breaks, never over a blank line
_CODE_SPAN = re.compile(r"(?<!`)(`+)((?:(?!\n[ \t]*\n)[^`]|(?!\1)`+)+?)\1(?!`)")
#: an inline link or image: [text](target "title"); the target may be written <like this>
_INLINE_LINK = re.compile(
    r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"  # the text, which may hold one level of brackets
    r"\(\s*(<[^>\n]*>|[^)\s]*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"  # (target "title")
)
_REFERENCE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\[([^\]]*)\]")
_DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>\n]*>|\S+)", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_HTML_TAG = re.compile(r"<[^>\n]+>")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Link:
    """A link target as written, and the line (1-based) it is on."""

    line: int
    target: str


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    target: str
    why: str

    def render(self, root: Path) -> str:
        return f"{_shown(self.path, root)}:{self.line}: broken link {self.target}: {self.why}"


def slug(text: str) -> str:
    """GitHub's slug of a heading's rendered text (before de-duplication)."""
    kept = [
        char for char in text.strip().lower()
        if char in " -" or unicodedata.category(char)[0] in "LMN" or unicodedata.category(char) == "Pc"
    ]
    return "".join(kept).replace(" ", "-")


def heading_text(raw: str) -> str:
    """The text a heading's Markdown renders to: code spans verbatim, link text without targets."""
    parts: list[str] = []
    position = 0
    for match in _CODE_SPAN.finditer(raw):
        parts.append(_render_inline(raw[position:match.start()]))
        parts.append(match.group(2).strip() if match.group(2).strip() else match.group(2))
        position = match.end()
    parts.append(_render_inline(raw[position:]))
    return "".join(parts)


def _render_inline(text: str) -> str:
    text = _INLINE_LINK.sub(lambda m: m.group(1), text)
    text = _REFERENCE_LINK.sub(lambda m: m.group(1), text)
    text = _HTML_TAG.sub("", text)
    text = re.sub(r"\\(.)", r"\1", text)
    return text.replace("*", "")


def _blank_code_spans(text: str) -> str:
    """The text with every inline code span blanked (line breaks and columns kept)."""
    return _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = _FENCE.match(line)
        if fence is None:
            if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
                fence = opened.group(1)
                continue
            yield number, line
        elif opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) \
                and not opened.group(2).strip():
            fence = None


def _prose(text: str) -> str:
    """The text with fenced code blocks blanked to empty lines (line numbers kept)."""
    lines = [""] * len(text.splitlines())
    for number, line in _prose_lines(text):
        lines[number - 1] = line
    return "\n".join(lines)


def anchors(text: str) -> set[str]:
    """Every anchor a document offers: its headings' slugs (duplicates suffixed) and HTML anchors."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in _prose_lines(text):
        found.update(_HTML_ANCHOR.findall(line))
        match = _ATX.match(line)
        if not match:
            continue
        raw = _CLOSING_HASHES.sub("", match.group(2) or "")
        base = slug(heading_text(raw))
        candidate = base
        while candidate in counts:
            counts[base] += 1
            candidate = f"{base}-{counts[base]}"
        counts.setdefault(base, 0)
        counts[candidate] = 0
        found.add(candidate)
    return found


def links(text: str) -> list[Link]:
    """Every link target of a document outside code, with its line, in the order of the lines."""
    prose = _blank_code_spans(_prose(text))
    found = [(match.start(2), match.group(2)) for match in _INLINE_LINK.finditer(prose)]
    found += [(match.start(2), match.group(2)) for match in _DEFINITION.finditer(prose)]
    return [Link(prose.count("\n", 0, start) + 1, target.strip("<>")) for start, target in sorted(found)]


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


class Checker:
    """Checks documents, reading each file and its anchors once."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._anchors: dict[Path, set[str]] = {}

    def anchors_of(self, path: Path) -> set[str]:
        if path not in self._anchors:
            self._anchors[path] = anchors(path.read_text(encoding="utf-8"))
        return self._anchors[path]

    def check_link(self, source: Path, link: Link) -> tuple[Problem | None, Path | None]:
        """The problem with one link (or None) and the Markdown file it leads to (or None)."""
        target = link.target
        if not target or _SCHEME.match(target) or target.startswith("//"):
            return None, None
        path_part, _, anchor = target.partition("#")
        if path_part:
            if path_part.startswith("/"):
                destination = self.root / unquote(path_part.lstrip("/"))
            else:
                destination = source.parent / unquote(path_part)
            destination = destination.resolve()
            if not destination.exists():
                why = f"{_shown(destination, self.root)} does not exist"
                return Problem(source, link.line, target, why), None
        else:
            destination = source
        is_markdown = destination.is_file() and destination.suffix.lower() == ".md"
        if anchor and is_markdown and unquote(anchor) not in self.anchors_of(destination):
            why = f"no heading with the anchor #{anchor} in {_shown(destination, self.root)}"
            return Problem(source, link.line, target, why), destination
        return None, destination if is_markdown else None

    def check(self, documents: Iterable[Path]) -> tuple[list[Problem], list[Path]]:
        """The problems of the documents and of every repository Markdown file they lead to."""
        queue = [path.resolve() for path in documents]
        seen: set[Path] = set()
        problems: list[Problem] = []
        while queue:
            path = queue.pop(0)
            if path in seen:
                continue
            seen.add(path)
            for link in links(path.read_text(encoding="utf-8")):
                problem, destination = self.check_link(path, link)
                if problem:
                    problems.append(problem)
                if destination and destination not in seen and destination.is_relative_to(self.root):
                    queue.append(destination)
        return problems, sorted(seen)


def documents(root: Path = ROOT) -> list[Path]:
    """The documents the check starts from: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def check(root: Path = ROOT) -> tuple[list[Problem], list[Path]]:
    return Checker(root).check(documents(root))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice_dev.doclinks",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the repository root (default: this checkout's)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    problems, checked = check(root)
    for problem in problems:
        print(problem.render(root), file=sys.stderr)
    if problems:
        print(f"{len(problems)} broken link(s) in {len(checked)} Markdown file(s)", file=sys.stderr)
        return 1
    print(f"links of {len(checked)} Markdown file(s) checked: none broken")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
