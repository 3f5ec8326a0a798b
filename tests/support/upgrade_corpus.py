"""Loading the annotated upgrade corpus (tests/corpus/upgrades/NN-name.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sluice.core.compiler import compile_query
from sluice.core.manifest import QueryManifest, parse_manifest
from sluice.core.plan.model import Plan

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "upgrades"


@dataclass
class Pair:
    name: str
    path: Path
    doc: dict[str, Any]
    old: QueryManifest
    new: QueryManifest

    @property
    def expect(self) -> dict[str, Any]:
        return dict(self.doc["expect"])

    def plans(self) -> tuple[Plan, Plan]:
        return compile_query(self.old.spec), compile_query(self.new.spec)


def pair_files() -> list[Path]:
    return sorted(CORPUS.glob("[0-9][0-9]-*.yaml"))


def load(path: Path) -> Pair:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return Pair(
        name=path.stem,
        path=path,
        doc=doc,
        old=parse_manifest(yaml.safe_dump(doc["old"])),
        new=parse_manifest(yaml.safe_dump(doc["new"])),
    )
