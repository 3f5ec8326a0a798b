"""Upgrade classification: which changes keep state and offsets, which need a new checkpoint."""

from sluice.core.classify.classifier import classify
from sluice.core.classify.model import SEVERITY, Category, Change, Decision, UpgradeDecision

__all__ = ["SEVERITY", "Category", "Change", "Decision", "UpgradeDecision", "classify"]
