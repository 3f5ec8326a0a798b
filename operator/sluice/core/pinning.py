"""Pinned plans across operator upgrades: when the plan is re-derived, and the re-plan on offer (pure).

A reconcile whose plan inputs (:func:`sluice.core.engine.plan_inputs`) equal the pinned plan's keeps
the pinned plan, whatever this operator's compiler makes of the same spec. When the compiler would
plan it differently, the difference is classified and *offered* (``status.plan.replan``, the
``ReplanAvailable`` condition, ``kubectl sluice plan``/``diff``); nothing is carried out until the
user accepts it by writing the offered hash into the query's :data:`REPLAN_ANNOTATION`
(``kubectl sluice replan``). The accepted re-plan is then an upgrade like any other: classified,
gated, rolled back on failure.
"""

from __future__ import annotations

from sluice.core.classify.model import UpgradeDecision
from sluice.core.records import Replan

#: StreamingQuery annotation: the hash (or its first 12 or more characters) of the re-plan accepted
REPLAN_ANNOTATION = "sluice.dev/replan"
MIN_ACCEPT_PREFIX = 12


def accepts(annotation: str | None, plan_hash: str) -> bool:
    """Whether the annotation accepts the re-plan to ``plan_hash`` (a prefix of at least 12
    characters, so that a later compiler's different plan is never accepted by an old answer)."""
    value = (annotation or "").strip().lower()
    return len(value) >= MIN_ACCEPT_PREFIX and plan_hash.startswith(value)


def replan_record(decision: UpgradeDecision, plan_hash: str, compiler: str) -> Replan:
    """``status.plan.replan``: what carrying out the re-plan to ``plan_hash`` would do."""
    reasons = [str(r) for r in decision.reasons]
    what = {"none": "nothing would change", "in-place": "it would be carried out in place",
            "replace": "it needs a replace (a new checkpoint)",
            "reject": "it would be refused"}.get(decision.decision, decision.decision)
    return Replan(
        hash=plan_hash, category=str(decision.category), decision=str(decision.decision), reasons=reasons[:5],
        compiler=compiler,
        message=(f"operator {compiler} plans this spec differently ({decision.category}: {what}); the "
                 f"running plan stays pinned. Accept with: kubectl sluice replan (annotation "
                 f"{REPLAN_ANNOTATION}={plan_hash[:MIN_ACCEPT_PREFIX]})"))


def refused_record(message: str, compiler: str) -> Replan:
    """``status.plan.replan`` when this operator's compiler refuses a spec an earlier one compiled."""
    return Replan(hash="", category="unsupported", decision="reject", reasons=[message], compiler=compiler,
                  message=f"operator {compiler} does not compile this spec ({message}); the running plan "
                  f"stays pinned and runs on")
