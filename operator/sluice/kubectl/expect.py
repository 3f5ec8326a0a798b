"""What the operator will do with a spec, judged from the live object (pure).

The operator's reconcile asks the rollout state machine (``sluice.core.rollout.next_action``) what
to do with the compiled spec, given the pinned plan, the rollout in flight and the last upgrade;
an edit is then classified (``sluice.core.classify.classify``) against the plan the workload runs,
under ``spec.upgrade`` or else the QueryCluster's ``spec.upgrade``. This module makes the same
calls on the object as read from the API server; the caller reads the ConfigMap of the plan it
names (:attr:`View.basis_config_map`) and classifies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.core.records import QueryRecords
from sluice.core.rollout import BACKFILL, REVERTIBLE, Step, deployed_hash, next_action
from sluice.core.spec import UpgradePolicy
from sluice.core.status import short_hash as short


@dataclass(frozen=True)
class View:
    """What the reconcile does with a spec that compiles to ``new_hash``."""

    #: ``new`` (no such object), or the state machine's action: create, steady, classify, resume,
    #: revert, cancel, wait, held
    action: str
    new_hash: str
    #: the plan the edit is compared with, and the ConfigMap holding it (None: nothing to compare)
    basis_hash: str | None = None
    basis_config_map: str | None = None
    #: what happens besides (or instead of) the classification, one sentence; "" when the
    #: classification says it all
    note: str = ""


def view(live: Mapping[str, Any] | None, new_hash: str, *, spec_changes: bool) -> View:
    """What the operator does once the spec that compiles to ``new_hash`` is applied to ``live``
    (None: the object does not exist); ``spec_changes``: whether that changes the live spec (an
    apply that changes nothing keeps the generation)."""
    if live is None:
        return View("new", new_hash, note=f"it does not exist yet: it would be created, and the operator "
                    f"deploys plan {short(new_hash)} as plan version 1")
    records = QueryRecords.of(live.get("status"))
    pinned, rollout = records.plan, records.rollout
    generation = (live.get("metadata") or {}).get("generation")
    if generation is not None and spec_changes:
        generation = int(generation) + 1
    action = next_action(pinned, rollout, new_hash, records.last_upgrade, generation)
    step = rollout.step if rollout else None
    target = rollout.target_hash if rollout else None
    pinned_hash = pinned.hash if pinned else None
    pinned_cm = pinned.config_map if pinned else None
    if action.kind == "create" or not pinned_hash:  # (a first deployment in flight: the newest spec wins)
        return View("create", new_hash, note=f"no plan is pinned yet: the operator deploys plan "
                    f"{short(new_hash)} as the first plan")
    if action.kind in ("resume", "revert") and step in REVERTIBLE:
        # the upgrade in flight is finished (or rolled back) first; the edit is then classified
        # against the plan that runs: its target, if it succeeds
        target_cm = (rollout.target_config_map if rollout else None) or pinned_cm
        if action.kind == "revert":
            return View("revert", new_hash, target, target_cm,
                        f"the spec is back at the running plan {short(new_hash)}: the upgrade in flight "
                        f"({step}, to plan {short(target)}) is rolled back (outcome Cancelled)")
        if target == new_hash:
            return View("resume", new_hash, pinned_hash, pinned_cm,
                        f"the upgrade to this plan is already in flight ({step})")
        return View("resume", new_hash, target, target_cm,
                    f"an upgrade is in flight ({step}, to plan {short(target)}): the operator finishes it "
                    f"first, then classifies this edit against the plan that runs; if that upgrade "
                    f"succeeds, it is classified as above")
    if action.kind == "resume":  # RollingBack or Deploying: the stable plan runs again afterwards
        return View("resume", new_hash, pinned_hash, pinned_cm,
                    f"the operator first finishes the rollout in flight ({step}), then classifies this "
                    f"edit against plan {short(pinned_hash)}")
    deployed = deployed_hash(pinned, rollout)
    deployed_cm = (rollout.target_config_map if rollout and deployed != pinned_hash else None) or pinned_cm
    if action.kind == "cancel":
        return View("cancel", new_hash, deployed, deployed_cm,
                    f"the spec is back at the running plan: the waiting upgrade ({step}, to plan "
                    f"{short(target)}) is dropped (outcome Cancelled)")
    if action.kind == "wait":
        failed = "the query stays on this plan, which failed its gate, until the next edit"
        waits = f"this edit already waits ({step}): {rollout.message if rollout else None}"
        what = failed if step == Step.FAILED else waits
        return View("wait", new_hash, deployed, deployed_cm, what)
    if action.kind == "held":
        return View("held", new_hash, deployed, deployed_cm,
                    f"the upgrade to plan {short(new_hash)} was rolled back at this generation: it is not "
                    f"tried again until the spec is edited")
    if action.kind == "steady":
        return View("steady", new_hash, deployed, deployed_cm)
    return View("classify", new_hash, deployed, deployed_cm)


def policy_of(spec: Mapping[str, Any], cluster_spec: Mapping[str, Any] | None) -> tuple[UpgradePolicy, str]:
    """The upgrade policy the operator applies to ``spec``, and where it comes from: ``spec.upgrade``,
    else the QueryCluster's (its defaults when it sets none, or is missing or invalid)."""
    from pydantic import ValidationError

    own = spec.get("upgrade")
    if own:
        return UpgradePolicy.model_validate(own), "spec.upgrade"
    ref = spec.get("clusterRef") or {}
    name = ref.get("name") if isinstance(ref, Mapping) else None
    name = name or "default"
    if cluster_spec is None:
        return UpgradePolicy(), f"the defaults (QueryCluster {name!r} not found)"
    try:
        return UpgradePolicy.model_validate(cluster_spec.get("upgrade") or {}), f"QueryCluster {name!r}"
    except ValidationError:
        return UpgradePolicy(), f"the defaults (QueryCluster {name!r} has an invalid spec.upgrade)"


def consequence(result: Mapping[str, Any], policy: UpgradePolicy, source: str, basis: View) -> str:
    """What the operator does with a classification, one sentence (the note of :class:`View` aside)."""
    decision = result.get("decision")
    if basis.action in ("revert", "cancel", "wait", "held"):
        return ""
    if decision == "none":
        return "nothing to roll out: the plan and how it runs stay as they are"
    if decision == "in-place":
        if basis.action == "steady":  # same plan: only settings outside it changed
            return "same plan: the drivers roll onto the new settings, on the same checkpoint"
        return ("in-place upgrade: a driver on the new plan warms up, takes over on the same checkpoint, "
                "and the health gate decides (a failed gate rolls back)")
    if decision == "replace":
        how = ("with backfill: the new version re-reads its sources into a versioned topic beside the "
               "running one, and takes over once caught up" if policy.replace_strategy == BACKFILL else
               "with hand-off: the new version starts on a new checkpoint where the running one's output "
               "ends, same topic")
        return f"replace {how} (policy from {source})"
    return f"refused: the query stays on the running plan (policy from {source})"
