"""Pod templates of the driver and executor pods (``spec.podTemplate`` of both kinds).

Typed where the operator reads it (labels, annotations, nodeSelector, tolerations, affinity down to
its term lists, topology spread constraints, the scheduling names, imagePullSecrets); the terms of an
affinity and a label selector are kept as Kubernetes has them (``x-kubernetes-preserve-unknown-fields``),
the API server checks them when it gets the pods. A template's ``metadata`` and ``spec`` keep unknown
fields in the CRD schema on purpose: the API server must not prune a protected field (``containers``,
``securityContext``, ...) before the webhook and the reconcile can refuse it with its path
(``sluice.core.podtemplate.problems``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sluice.core import podtemplate
from sluice.crd.base import CrdModel, refusal, value_at

__all__ = ["Affinity", "LocalObjectReference", "NodeAffinity", "PodAffinity", "PodTemplate",
           "PodTemplateMetadata", "PodTemplateSpec", "PodTemplates", "Toleration", "TopologySpreadConstraint"]

#: a template's metadata and spec: unknown fields reach the operator's check instead of being pruned
_OPEN = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                   json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})


class PodTemplateMetadata(CrdModel):
    """Labels and annotations added to the pods (the operator's own keys are refused)."""

    model_config = _OPEN

    labels: dict[str, str] | None = Field(default=None, description="Labels added to the pods.")
    annotations: dict[str, str] | None = Field(default=None, description="Annotations added to the pods.")


class Toleration(CrdModel):
    """A toleration of node taints (core/v1 Toleration)."""

    key: str | None = Field(default=None,
                            description="The taint key; empty with operator Exists: every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None,
                                                        description="Exists or Equal (default).")
    value: str | None = Field(default=None, description="The taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect to tolerate; empty: every effect.")
    toleration_seconds: int | None = Field(
        default=None, description="How long a NoExecute taint is tolerated once added; empty: forever.")


class LocalObjectReference(CrdModel):
    """A Secret of the namespace (core/v1 LocalObjectReference)."""

    name: str = Field(min_length=1, max_length=253, description="Name of a Secret in the namespace.")


class NodeAffinity(CrdModel):
    """Node affinity (core/v1 NodeAffinity); its node selector and terms as Kubernetes has them."""

    required_during_scheduling_ignored_during_execution: dict[str, Any] | None = Field(
        default=None, description="A NodeSelector ({nodeSelectorTerms: [...]}) the node must match.")
    preferred_during_scheduling_ignored_during_execution: list[dict[str, Any]] | None = Field(
        default=None, description="Weighted PreferredSchedulingTerms ({weight, preference}).")


class PodAffinity(CrdModel):
    """Pod affinity or anti-affinity (core/v1); its terms as Kubernetes has them. On the drivers, these
    terms are added to the operator's (which keep the drivers next to their state volume, or apart)."""

    required_during_scheduling_ignored_during_execution: list[dict[str, Any]] | None = Field(
        default=None, description="PodAffinityTerms ({labelSelector, topologyKey, ...}) that must hold.")
    preferred_during_scheduling_ignored_during_execution: list[dict[str, Any]] | None = Field(
        default=None, description="Weighted PodAffinityTerms ({weight, podAffinityTerm}).")


class Affinity(CrdModel):
    """Scheduling affinity (core/v1 Affinity)."""

    node_affinity: NodeAffinity | None = Field(default=None, description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(
        default=None, description="Pod affinity (added to the operator's).")
    pod_anti_affinity: PodAffinity | None = Field(
        default=None, description="Pod anti-affinity (added to the operator's).")


class TopologySpreadConstraint(CrdModel):
    """How the pods spread over a topology (core/v1 TopologySpreadConstraint)."""

    max_skew: int = Field(ge=1, description="The largest difference of matching pods between domains.")
    topology_key: str = Field(min_length=1, description="The node label that names a domain.")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        description="DoNotSchedule or ScheduleAnyway.")
    label_selector: dict[str, Any] | None = Field(
        default=None, description="The pods counted (a LabelSelector: matchLabels, matchExpressions).")
    match_label_keys: list[str] | None = Field(
        default=None, description="Label keys whose values of the incoming pod are added to the selector.")
    min_domains: int | None = Field(default=None, ge=1, description="Minimum number of eligible domains.")
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether node affinity and nodeSelector limit the domains.")
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether node taints limit the domains.")


class PodTemplateSpec(CrdModel):
    """The pod spec fields a template may set; every other one is refused (the operator's own by name)."""

    model_config = _OPEN

    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels the pods' nodes must have.")
    tolerations: list[Toleration] | None = Field(default=None, description="Taints the pods tolerate.")
    affinity: Affinity | None = Field(default=None, description="Node affinity, and pod (anti-)affinity "
                                      "added to the operator's.")
    topology_spread_constraints: list[TopologySpreadConstraint] | None = Field(
        default=None, description="How the pods spread over zones or nodes.")
    priority_class_name: str | None = Field(
        default=None, min_length=1, max_length=253, description="PriorityClass of the pods.")
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, description="Secrets to pull the runtime image with (a private registry).")
    scheduler_name: str | None = Field(
        default=None, min_length=1, description="The scheduler of the pods; absent: the default scheduler.")
    runtime_class_name: str | None = Field(
        default=None, min_length=1, max_length=253, description="RuntimeClass of the pods.")


class PodTemplate(CrdModel):
    """A partial Pod laid over the pods the operator builds: placement and metadata only."""

    api_version: Literal["v1"] | None = Field(default=None, alias="apiVersion",
                                              description="v1 (optional, as in a Pod manifest).")
    kind: Literal["Pod"] | None = Field(default=None, description="Pod (optional, as in a Pod manifest).")
    metadata: PodTemplateMetadata | None = Field(
        default=None, description="Labels and annotations added to the pods.")
    spec: PodTemplateSpec | None = Field(
        default=None, description="nodeSelector, tolerations, affinity, topologySpreadConstraints, "
        "priorityClassName, imagePullSecrets, schedulerName, runtimeClassName; containers, volumes, "
        "securityContext, serviceAccountName, restartPolicy and terminationGracePeriodSeconds are the "
        "operator's and refused.")


class PodTemplates(CrdModel):
    """Pod templates per role (a query's are laid over its QueryCluster's: maps merged key by key, the
    rest replaced)."""

    driver: PodTemplate | None = Field(
        default=None, description="Template of the driver pods (the driver Deployment's, and a backfill's).")
    executor: PodTemplate | None = Field(
        default=None, description="Template of the executor pods Spark creates (with executors > 0).")

    @model_validator(mode="before")
    @classmethod
    def _protected(cls, data: Any) -> Any:
        found = podtemplate.problems(data)
        if found:
            raise refusal("PodTemplates", "pod_template", [(p.loc, p.message, value_at(data, p.loc))
                                                           for p in found])
        return data

    def wire(self) -> dict[str, Any]:
        """The templates as on the wire (camelCase, unset fields left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def is_empty(self) -> bool:
        return not podtemplate.compact(self.wire())
