"""The result of classifying an upgrade: categories, decisions, and every change found."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

Category = Literal[
    "none", "transparent", "data-selection", "schema-evolution", "topology", "source-modifying", "unsupported"
]
Decision = Literal["none", "in-place", "replace", "reject"]

#: Categories from least to most severe; the most severe change decides the upgrade.
SEVERITY: tuple[Category, ...] = (
    "none",
    "transparent",
    "data-selection",
    "schema-evolution",
    "topology",
    "source-modifying",
    "unsupported",
)

#: What each category needs, before the upgrade policy is applied.
DECISION_FOR: dict[str, Decision] = {
    "none": "none",
    "transparent": "in-place",
    "data-selection": "in-place",
    # Output columns change but no operator state does (a state change is always reported as a
    # separate topology change, which then wins): the checkpoint stays valid.
    "schema-evolution": "in-place",
    "topology": "replace",
    "source-modifying": "replace",
    "unsupported": "reject",
}


def severity(category: str) -> int:
    return SEVERITY.index(category)  # type: ignore[arg-type]


class ClassifyModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class Change(ClassifyModel):
    """One difference between the old and the new plan, with what it means for the upgrade."""

    category: Category
    step: str | None = Field(
        description="Id of the step that changed; 'settings' or 'plan' for plan-level fields."
    )
    field: str = Field(description="Field of the step (or plan) that changed, e.g. 'keys', 'window.size'.")
    old: Any = None
    new: Any = None
    message: str = Field(
        description="A sentence a user can act on: step, field, old -> new, and why it matters."
    )


def change(category: Category, step: str | None, field: str, old: Any, new: Any, message: str) -> Change:
    """One ``Change``: its category, where (step id, field), the old and new value, and the sentence."""
    return Change(category=category, step=step, field=field, old=old, new=new, message=message)


class UpgradeDecision(ClassifyModel):
    """What an upgrade from one plan to another needs."""

    category: Category
    decision: Decision
    reasons: list[str] = Field(default_factory=list)
    changes: list[Change] = Field(default_factory=list)
    old_hash: str = ""
    new_hash: str = ""

    def to_json_dict(self) -> dict[str, Any]:
        """``{"category", "decision", "reasons", "changes"}`` (camelCase, JSON types)."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"old_hash", "new_hash"})
        return data
