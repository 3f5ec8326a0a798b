"""Container environment: ``$(VAR)`` expansion and resolution of ``env``/``envFrom`` (pure).

Follows the kubelet: ``envFrom`` sources first (in order, optional prefix, keys that are not
valid variable names skipped), then ``env`` entries in order, each ``value`` expanded against the
variables defined so far (and the in-cluster service variables). Unresolvable references stay
as written; ``$$`` escapes a ``$``.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]

#: (kind, namespace, name) -> data dict (secrets already decoded) or None when missing.
Lookup = Callable[[str, str, str], "dict[str, str] | None"]

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class EnvError(ValueError):
    """The environment cannot be built (the kubelet's CreateContainerConfigError)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append(text[i:])
                break
            name = text[i + 2 : close]
            out.append(env[name] if name in env else text[i : close + 1])
            i = close + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def field_value(pod: Obj, path: str, pod_ip: str) -> str:
    """Value of a downward-API ``fieldRef.fieldPath``."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path])
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1], {}) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise EnvError(f"unsupported fieldPath {path!r}")


_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "m": 1e-3,
}


def quantity(value: str) -> float:
    """A Kubernetes quantity (``500m``, ``1Gi``, ``2``) as a number."""
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value).strip())
    if not match:
        raise EnvError(f"bad quantity {value!r}")
    number, suffix = float(match.group(1)), match.group(2)
    if suffix and suffix not in _SUFFIX:
        raise EnvError(f"bad quantity suffix {value!r}")
    return number * _SUFFIX.get(suffix, 1)


def resource_value(container: Obj, ref: Obj, defaults: Mapping[str, str]) -> str:
    """Value of a ``resourceFieldRef`` (limits fall back to node allocatable, like the kubelet)."""
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    resources = container.get("resources", {}) or {}
    raw = (resources.get(kind, {}) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits", {}) or {}).get(name)
    if raw is None:
        raw = defaults.get(name, "0")
    divisor = quantity(ref.get("divisor", "1") or "1")
    return str(math.ceil(quantity(raw) / divisor))


def _source(lookup: Lookup, kind: str, namespace: str, ref: Obj) -> dict[str, str] | None:
    data = lookup(kind, namespace, ref.get("name", ""))
    if data is None and not ref.get("optional", False):
        raise EnvError(f"{kind} {namespace}/{ref.get('name')} not found")
    return data


def resolve(
    pod: Obj,
    container: Obj,
    *,
    pod_ip: str,
    lookup: Lookup,
    base: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's environment: ``base`` (image/service variables), ``envFrom``, ``env``."""
    namespace = pod.get("metadata", {}).get("namespace", "default")
    env: dict[str, str] = dict(base or {})
    for source in container.get("envFrom", []) or []:
        prefix = source.get("prefix", "") or ""
        if "configMapRef" in source:
            data = _source(lookup, "configmap", namespace, source["configMapRef"])
        elif "secretRef" in source:
            data = _source(lookup, "secret", namespace, source["secretRef"])
        else:
            continue
        for key, value in (data or {}).items():
            if _ENV_NAME.match(prefix + key):
                env[prefix + key] = value
    for item in container.get("env", []) or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(item.get("value", "") or "", env)
            continue
        ref = item["valueFrom"]
        if "fieldRef" in ref:
            env[name] = field_value(pod, ref["fieldRef"]["fieldPath"], pod_ip)
        elif "resourceFieldRef" in ref:
            env[name] = resource_value(container, ref["resourceFieldRef"], allocatable or {})
        elif "configMapKeyRef" in ref or "secretKeyRef" in ref:
            kind = "configmap" if "configMapKeyRef" in ref else "secret"
            key_ref = ref.get("configMapKeyRef") or ref.get("secretKeyRef")
            data = _source(lookup, kind, namespace, key_ref)
            if data is not None and key_ref["key"] in data:
                env[name] = data[key_ref["key"]]
            elif not key_ref.get("optional", False):
                raise EnvError(f"key {key_ref['key']!r} not found in {kind} {namespace}/{key_ref['name']}")
        else:
            raise EnvError(f"unsupported valueFrom in env {name!r}")
    return env


def decode_secret(secret: Obj) -> dict[str, str]:
    """``data`` (base64) and ``stringData`` of a Secret as text."""
    out = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (secret.get("data") or {}).items()}
    out.update(secret.get("stringData") or {})
    return out


def expand_argv(command: list[str], env: Mapping[str, str]) -> list[str]:
    return [expand(str(part), env) for part in command]
