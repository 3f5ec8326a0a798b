"""Pod templates (pure): what a platform team may add to the pods of a query, and how it is merged.

A pod template is a partial Kubernetes Pod (``{metadata, spec}``, camelCase as on the wire), one per
role: ``driver`` (the driver Deployment's pods, and a backfill's) and ``executor`` (the pods Spark's
Kubernetes scheduler creates from the executor pod template the driver gets). A QueryCluster and a
StreamingQuery may each give one per role (``spec.podTemplate.driver`` / ``.executor``); the query's
wins (:func:`merge`), then the result is laid over the pod the operator builds (:func:`apply`).

What a template may set (:data:`SPEC_FIELDS`, labels and annotations) is placement and identity
only. Everything the operator sets itself (containers, volumes, the security contexts, the service
account, the termination grace derived from ``drainSeconds``, its own labels and annotations) is
*owned by the operator*: a template that sets it is refused (:func:`problems`) with the field's
path, by the admission webhook and by the reconcile alike. Fields the operator neither owns nor
supports (``hostNetwork``, ``initContainers``, ``dnsPolicy``, ...) are refused too.

Merge rules (query over cluster, :func:`merge`): the string maps ``metadata.labels``,
``metadata.annotations`` and ``spec.nodeSelector`` are merged key by key; ``spec.affinity`` kind by
kind (``nodeAffinity``, ``podAffinity``, ``podAntiAffinity``, each replaced whole); every other field,
lists included (``tolerations``, ``imagePullSecrets``, ``topologySpreadConstraints``), is replaced
whole by the query's when the query sets it (an empty list clears the cluster's).

Onto the operator's pod (:func:`apply`): labels, annotations and the supported spec fields are added
(its own keys are protected); affinity is merged: the template's ``nodeAffinity`` is used, and its
``podAffinity`` / ``podAntiAffinity`` terms are added after the operator's (the drivers' placement
next to, or away from, each other is kept); tolerations are added after the operator's (the drivers'
short ones of a lost node), a template's toleration of a taint the operator tolerates replacing the
operator's. An empty template
changes nothing: the pod comes back as it was.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: role -> the name of the one container the operator gives that role's pods
ROLES: dict[str, str] = {"driver": "driver", "executor": "executor"}

#: the pod spec fields a template may set
SPEC_FIELDS: tuple[str, ...] = (
    "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "priorityClassName",
    "imagePullSecrets", "schedulerName", "runtimeClassName",
)
#: the metadata fields a template may set
METADATA_FIELDS: tuple[str, ...] = ("labels", "annotations")
#: a template's own fields (``apiVersion: v1`` and ``kind: Pod`` may be written, as in a Pod manifest)
TEMPLATE_FIELDS: tuple[str, ...] = ("apiVersion", "kind", "metadata", "spec")

OWNED = "owned by the operator"

#: pod spec fields the operator sets (or derives) itself, and what to use instead where there is something
OWNED_SPEC_FIELDS: dict[str, str] = {
    "containers": "",
    "volumes": "",
    "securityContext": "",
    "serviceAccountName": "",
    "serviceAccount": "",
    "automountServiceAccountToken": "",
    "restartPolicy": "",
    "terminationGracePeriodSeconds": "derived from the QueryCluster's spec.drainSeconds",
    "enableServiceLinks": "",
}
#: container fields with a setting of their own elsewhere (every container field is the operator's)
OWNED_CONTAINER_HINTS: dict[str, str] = {
    "image": "the QueryCluster's spec.image",
    "imagePullPolicy": "the QueryCluster's spec.imagePullPolicy",
    "resources": "spec.resources of the StreamingQuery, spec.driver / spec.executor of the QueryCluster",
}

#: label keys the operator (or Spark, on executors) sets on the pods it makes
OWNED_LABELS: frozenset[str] = frozenset({
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of",
    "spark-app-selector", "spark-app-name", "spark-role", "spark-exec-id", "spark-exec-resourceprofile-id",
})
#: annotation keys the operator (or its runtime) sets on the pods
OWNED_ANNOTATIONS: frozenset[str] = frozenset({
    "prometheus.io/scrape", "prometheus.io/port", "controller.kubernetes.io/pod-deletion-cost",
})
#: the operator's own prefix: every label and annotation under it is the operator's
OWNED_PREFIX = "sluice.dev/"

#: the affinity kinds whose terms are lists added to the operator's
POD_AFFINITY_KINDS: tuple[str, ...] = ("podAffinity", "podAntiAffinity")
AFFINITY_KINDS: tuple[str, ...] = ("nodeAffinity", *POD_AFFINITY_KINDS)
#: metadata and spec fields that are string maps: merged key by key
MERGED_MAPS: frozenset[tuple[str, str]] = frozenset({
    ("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector"),
})

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")
_PREFIX_MAX = 253

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class TemplateProblem:
    """One refused part of a pod template: where (relative to ``podTemplate``) and why."""

    loc: Loc
    message: str

    def path(self, prefix: str = "spec.podTemplate") -> str:
        """``spec.podTemplate.driver.spec.containers[0].securityContext`` (the manifest's path)."""
        out = prefix
        for part in self.loc:
            out += f"[{part}]" if isinstance(part, int) else f".{part}"
        return out


def _not_supported(allowed: tuple[str, ...]) -> str:
    return f"not supported in a pod template (supported: {', '.join(allowed)})"


def _owned(hint: str) -> str:
    return f"{OWNED}: {hint}" if hint else OWNED


def _valid_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return bool(_LABEL_KEY.match(key)) and len(prefix) <= _PREFIX_MAX and len(name) <= 63


def _valid_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def _meta_key_problems(kind: str, entries: Any, loc: Loc) -> list[TemplateProblem]:
    if not isinstance(entries, Mapping):
        return []  # the model reports the type
    owned = OWNED_LABELS if kind == "labels" else OWNED_ANNOTATIONS
    out: list[TemplateProblem] = []
    for key, value in entries.items():
        where = (*loc, str(key))
        if str(key).startswith(OWNED_PREFIX) or key in owned:
            out.append(TemplateProblem(where, OWNED))
        elif not _valid_key(str(key)):
            out.append(TemplateProblem(where, f"not a valid {kind[:-1]} key (an optional DNS subdomain "
                                       f"prefix and '/', then at most 63 characters: letters, digits, '-', "
                                       f"'_', '.')"))
        elif kind == "labels" and isinstance(value, str) and not _valid_value(value):
            out.append(TemplateProblem(where, "not a valid label value (at most 63 characters: letters, "
                                       "digits, '-', '_', '.', starting and ending with a letter or digit)"))
    return out


def _metadata_problems(metadata: Any, loc: Loc) -> list[TemplateProblem]:
    if not isinstance(metadata, Mapping):
        return []
    out: list[TemplateProblem] = []
    for key, value in metadata.items():
        if key in METADATA_FIELDS:
            out += _meta_key_problems(str(key), value, (*loc, str(key)))
        else:
            out.append(TemplateProblem((*loc, str(key)), f"{OWNED} (a pod template sets only labels and "
                                       f"annotations)"))
    return out


def _container_problems(containers: Any, container: str, loc: Loc) -> list[TemplateProblem]:
    if not isinstance(containers, list):
        return [TemplateProblem(loc, OWNED)]
    out: list[TemplateProblem] = []
    for index, entry in enumerate(containers):
        where = (*loc, index)
        if not isinstance(entry, Mapping):
            out.append(TemplateProblem(where, OWNED))
            continue
        name = entry.get("name")
        if name is not None and name != container:
            out.append(TemplateProblem((*where, "name"), f"extra containers are not supported: the pod's one "
                                       f"container is {container!r}, the operator's"))
        out += [TemplateProblem((*where, str(key)), _owned(OWNED_CONTAINER_HINTS.get(str(key), "")))
                for key in entry if key != "name"]
    return out or [TemplateProblem(loc, OWNED)]


def _affinity_problems(affinity: Any, loc: Loc) -> list[TemplateProblem]:
    if not isinstance(affinity, Mapping):
        return []
    return [TemplateProblem((*loc, str(key)), _not_supported(AFFINITY_KINDS))
            for key in affinity if key not in AFFINITY_KINDS]


def _spec_problems(spec: Any, container: str, loc: Loc) -> list[TemplateProblem]:
    if not isinstance(spec, Mapping):
        return []
    out: list[TemplateProblem] = []
    for key, value in spec.items():
        where = (*loc, str(key))
        if key == "containers":
            out += _container_problems(value, container, where)
        elif key in OWNED_SPEC_FIELDS:
            out.append(TemplateProblem(where, _owned(OWNED_SPEC_FIELDS[key])))
        elif key == "affinity":
            out += _affinity_problems(value, where)
        elif key not in SPEC_FIELDS:
            out.append(TemplateProblem(where, _not_supported(SPEC_FIELDS)))
    return out


def template_problems(template: Any, role: str, loc: Loc = ()) -> list[TemplateProblem]:
    """What is refused in one role's template (empty: nothing). Only the fields' names and the
    label and annotation keys are checked here; their types are the CRD model's."""
    if not isinstance(template, Mapping):
        return []
    out: list[TemplateProblem] = []
    for key, value in template.items():
        where = (*loc, str(key))
        if key == "metadata":
            out += _metadata_problems(value, where)
        elif key == "spec":
            out += _spec_problems(value, ROLES[role], where)
        elif key not in TEMPLATE_FIELDS:
            out.append(TemplateProblem(where, _not_supported(TEMPLATE_FIELDS)))
    return out


def problems(templates: Any) -> list[TemplateProblem]:
    """What is refused in a ``podTemplate`` block (``{driver, executor}``), located from it."""
    if not isinstance(templates, Mapping):
        return []
    out: list[TemplateProblem] = []
    for role in ROLES:
        out += template_problems(templates.get(role), role, (role,))
    return out


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def compact(templates: Mapping[str, Any] | None) -> dict[str, Any]:
    """``templates`` without the empty fields, sections and roles (``{}`` when nothing is left), and
    without ``apiVersion`` and ``kind``, which say nothing.

    For a QueryCluster's templates, the base of the merge, an empty field means the same as an absent
    one; a query's empty list does not (it clears the cluster's), so a query's are never compacted."""
    out: dict[str, Any] = {}
    for role, template in (templates or {}).items():
        kept: dict[str, Any] = {}
        for section, fields in (template or {}).items():
            if section in ("apiVersion", "kind"):
                continue
            if isinstance(fields, Mapping):
                fields = {k: v for k, v in fields.items() if not _empty(v)}
            if not _empty(fields):
                kept[section] = fields
        if kept:
            out[role] = kept
    return out


def _merge_template(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for section, fields in over.items():
        if not isinstance(fields, Mapping) or not isinstance(out.get(section), Mapping):
            out[section] = copy.deepcopy(fields)
            continue
        merged = dict(out[section])
        for key, value in fields.items():
            if value is None:
                continue
            both_maps = isinstance(merged.get(key), Mapping) and isinstance(value, Mapping)
            if both_maps and ((section, key) in MERGED_MAPS or (section, key) == ("spec", "affinity")):
                # key by key (the affinity: kind by kind), the query's value winning
                merged[key] = {**merged[key], **{k: copy.deepcopy(v) for k, v in value.items()
                                                 if v is not None}}
            else:
                merged[key] = copy.deepcopy(value)
        out[section] = merged
    return out


def merge(cluster: Mapping[str, Any] | None, query: Mapping[str, Any] | None) -> dict[str, Any]:
    """The templates of a query's pods: the QueryCluster's (``cluster``), with the StreamingQuery's
    (``query``) over them, role by role (see the module's merge rules)."""
    out: dict[str, Any] = {}
    for role in ROLES:
        base, over = (cluster or {}).get(role), (query or {}).get(role)
        if base is None and over is None:
            continue
        out[role] = _merge_template(base or {}, over or {})
    return out


def _affinity(own: Mapping[str, Any] | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(own or {}))
    for kind, value in extra.items():
        if _empty(value):
            continue
        if kind in POD_AFFINITY_KINDS and isinstance(out.get(kind), Mapping) and isinstance(value, Mapping):
            terms = dict(out[kind])
            for when, more in value.items():
                if isinstance(more, list) and isinstance(terms.get(when), list):
                    terms[when] = [*terms[when], *copy.deepcopy(more)]
                elif not _empty(more):
                    terms[when] = copy.deepcopy(more)
            out[kind] = terms
        else:
            out[kind] = copy.deepcopy(value)
    return out


def _tolerations(own: list[Any], extra: list[Any]) -> list[Any]:
    """The operator's tolerations, then the template's; one of the operator's is left out when the
    template tolerates the same taint (key and effect; a toleration without an effect covers all)."""
    def covers(mine: Any, theirs: Any) -> bool:
        return (isinstance(mine, Mapping) and isinstance(theirs, Mapping)
                and theirs.get("key") == mine.get("key")
                and theirs.get("effect") in (None, "", mine.get("effect")))

    kept = [t for t in own if not any(covers(t, x) for x in extra)]
    return [*copy.deepcopy(kept), *copy.deepcopy(extra)]


def apply(pod: Mapping[str, Any], template: Mapping[str, Any] | None) -> dict[str, Any]:
    """The operator's pod (``{metadata?, spec}``: a Deployment's pod template, Spark's executor pod
    template) with ``template`` (one role's, merged) laid over it; a copy of ``pod`` as it was (the
    same keys in the same order) when the template adds nothing. Neither input is changed. Protected
    fields are expected to have been refused (:func:`problems`) already; they are never applied."""
    metadata = {k: v for k, v in ((template or {}).get("metadata") or {}).items()
                if k in METADATA_FIELDS and not _empty(v)}
    spec = {k: v for k, v in ((template or {}).get("spec") or {}).items()
            if k in SPEC_FIELDS and not _empty(v)}
    if not metadata and not spec:
        return dict(pod)
    out = dict(pod)
    if metadata:
        meta = dict(out.get("metadata") or {})
        for key, entries in metadata.items():
            meta[key] = {**(meta.get(key) or {}), **entries}
        out["metadata"] = meta
    if spec:
        pod_spec = dict(out.get("spec") or {})
        for key, value in spec.items():
            if key == "affinity":
                affinity = _affinity(pod_spec.get("affinity"), value)
                if affinity:
                    pod_spec["affinity"] = affinity
            elif key == "tolerations" and isinstance(value, list) and pod_spec.get("tolerations"):
                pod_spec["tolerations"] = _tolerations(pod_spec["tolerations"], value)
            else:
                pod_spec[key] = copy.deepcopy(value)
        out["spec"] = pod_spec
    return out
