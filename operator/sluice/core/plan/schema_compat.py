"""Compatibility check between two JSON Schemas of the plan (old: committed, new: from the models).

A change is compatible when every document valid under the old schema stays valid under the new
one: properties may be added (optional), enum values and step types may be added, constraints may
be loosened. Incompatible: removed properties, changed types, newly required properties, removed
enum/const values, removed step types, tightened constraints (minItems/maxItems, minLength/maxLength,
minimum/maximum and their exclusive forms, pattern, multipleOf, uniqueItems, additionalProperties).
The committed file is ``plan.schema.json`` next to this module; this module reads no files:
``python -m sluice_dev.plan_schema [--write]`` checks or regenerates it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Schema = dict[str, Any]


def current_schema() -> Schema:
    from sluice.core.plan.model import Plan

    return Plan.model_json_schema(by_alias=True)


def _resolve(node: Schema, root: Schema) -> tuple[Schema, str | None]:
    ref = node.get("$ref")
    if not ref:
        return node, None
    target: Any = root
    for part in ref.lstrip("#/").split("/"):
        target = target[part]
    return target, ref


def _types(node: Schema) -> set[str] | None:
    t = node.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _branches(node: Schema) -> list[Schema] | None:
    for key in ("anyOf", "oneOf"):
        if key in node:
            return list(node[key])
    return None


def incompatibilities(old: Schema, new: Schema) -> list[str]:
    """Reasons why documents valid under ``old`` may be invalid under ``new`` (empty: compatible)."""
    walk = _Walk(old, new)
    _compare(old, new, "$", walk)
    return walk.out


#: a pair of references already compared: (old $ref, new $ref, path; the path only when one side
#: is not a reference)
_Seen = tuple[str | None, str | None, str]


@dataclass(frozen=True)
class _Walk:
    """One comparison of two schemas: their roots (for ``$ref``), the problems found so far, and
    the pairs of references already compared (recursive models refer to themselves)."""

    oroot: Schema
    nroot: Schema
    out: list[str] = field(default_factory=list)
    seen: set[_Seen] = field(default_factory=set)

    def trial(self) -> _Walk:
        """A walk of its own, to try one alternative without reporting its problems here."""
        return _Walk(self.oroot, self.nroot, [], set(self.seen))


def _compare(o: Schema, n: Schema, path: str, walk: _Walk) -> None:
    """Compare the old schema node ``o`` with the new ``n`` at ``path``, recursively."""
    o, oref = _resolve(o, walk.oroot)
    n, nref = _resolve(n, walk.nroot)
    if oref or nref:
        key = (oref, nref, path if not (oref and nref) else "")
        if key in walk.seen:
            return
        walk.seen.add(key)
    if not n:
        return  # anything goes in the new schema
    odisc, ndisc = o.get("discriminator"), n.get("discriminator")
    if odisc and ndisc:
        _compare_step_types(odisc, ndisc, path, walk)
        return
    obranches, nbranches = _branches(o), _branches(n)
    if obranches is not None or nbranches is not None:
        olist = obranches if obranches is not None else [o]
        nlist = nbranches if nbranches is not None else [n]
        _compare_alternatives(olist, nlist, path, walk)
        return
    if _type_changed(o, n, path, walk.out):
        return
    _compare_values(o, n, path, walk.out)
    _compare_constraints(o, n, path, walk.out)
    _compare_properties(o, n, path, walk)
    if "items" in o and "items" in n:
        _compare(o["items"], n["items"], f"{path}[]", walk)
    if isinstance(o.get("additionalProperties"), dict) and isinstance(n.get("additionalProperties"), dict):
        _compare(o["additionalProperties"], n["additionalProperties"], f"{path}{{}}", walk)


def _compare_step_types(odisc: Schema, ndisc: Schema, path: str, walk: _Walk) -> None:
    """Discriminated unions (step types): every old step type must remain, and stay compatible."""
    omap, nmap = odisc.get("mapping", {}), ndisc.get("mapping", {})
    for name, ref in sorted(omap.items()):
        if name not in nmap:
            walk.out.append(f"{path}: step type '{name}' was removed")
        else:
            _compare({"$ref": ref}, {"$ref": nmap[name]}, f"{path}<{name}>", walk)


def _compare_alternatives(olist: list[Schema], nlist: list[Schema], path: str, walk: _Walk) -> None:
    """anyOf/oneOf: every old alternative must fit one new alternative; when none fits, the
    problems of the one that fits best are reported."""
    for i, ob in enumerate(olist):
        best: list[str] | None = None
        for nb in nlist:
            trial = walk.trial()
            _compare(ob, nb, path, trial)
            if best is None or len(trial.out) < len(best):
                best = trial.out
            if not trial.out:
                break
        if best:
            walk.out.extend(best if len(olist) == 1 else [f"{p} (alternative {i + 1})" for p in best])


def _type_changed(o: Schema, n: Schema, path: str, out: list[str]) -> bool:
    """Report a type that no longer accepts the old values (an integer stays a number); true when
    there is one, as nothing below it needs comparing then."""
    otypes, ntypes = _types(o), _types(n)
    if otypes is not None and ntypes is not None:
        lost = otypes - ntypes
        if "integer" in lost and "number" in ntypes:
            lost.discard("integer")
        if lost:
            out.append(f"{path}: type changed from {sorted(otypes)} to {sorted(ntypes)}")
            return True
    elif otypes is None and ntypes is not None and "const" not in o and "enum" not in o:
        out.append(f"{path}: type restricted to {sorted(ntypes)}")
        return True
    return False


def _compare_values(o: Schema, n: Schema, path: str, out: list[str]) -> None:
    """Allowed values (``const``, ``enum``): an old value must stay allowed."""
    if "const" in n and o.get("const") != n["const"]:
        if "const" in o or "enum" in o:
            out.append(f"{path}: value changed from {o.get('const', o.get('enum'))!r} to {n['const']!r}")
    if "enum" in n:
        old_values = o.get("enum", [o["const"]] if "const" in o else None)
        if old_values is None:
            out.append(f"{path}: values restricted to {n['enum']!r}")
        else:
            removed = [v for v in old_values if v not in n["enum"]]
            if removed:
                out.append(f"{path}: enum values removed: {removed!r}")


def _compare_properties(o: Schema, n: Schema, path: str, walk: _Walk) -> None:
    """Removed properties (unless the new schema accepts any), the properties kept, and properties
    newly required."""
    oprops, nprops = o.get("properties", {}), n.get("properties", {})
    for name in oprops:
        if name not in nprops:
            if n.get("additionalProperties") is False or nprops:
                walk.out.append(f"{path}.{name}: property was removed")
        else:
            _compare(oprops[name], nprops[name], f"{path}.{name}", walk)
    newly_required = sorted(set(n.get("required", [])) - set(o.get("required", [])))
    for name in newly_required:
        walk.out.append(f"{path}.{name}: property is newly required")


# lower bounds: a larger (or a new) value rejects documents the old schema accepted
_LOWER_BOUNDS = ("minItems", "minLength", "minProperties", "minimum", "exclusiveMinimum")
# upper bounds: a smaller (or a new) value rejects documents the old schema accepted
_UPPER_BOUNDS = ("maxItems", "maxLength", "maxProperties", "maximum", "exclusiveMaximum")


def _compare_constraints(o: Schema, n: Schema, path: str, out: list[str]) -> None:
    """Tightened value constraints (loosened or unchanged ones are compatible)."""
    for key in _LOWER_BOUNDS:
        if key in n and (key not in o or _number(n[key]) > _number(o[key])):
            out.append(f"{path}: {key} tightened from {o.get(key, 'none')} to {n[key]}")
    for key in _UPPER_BOUNDS:
        if key in n and (key not in o or _number(n[key]) < _number(o[key])):
            out.append(f"{path}: {key} tightened from {o.get(key, 'none')} to {n[key]}")
    if "pattern" in n and n["pattern"] != o.get("pattern"):
        # whether one regular expression accepts all strings of another is not decidable here
        out.append(f"{path}: pattern changed from {o.get('pattern', 'none')!r} to {n['pattern']!r}")
    if "multipleOf" in n and (
        "multipleOf" not in o or _number(o["multipleOf"]) % _number(n["multipleOf"]) != 0
    ):
        out.append(f"{path}: multipleOf changed from {o.get('multipleOf', 'none')} to {n['multipleOf']}")
    if n.get("uniqueItems") is True and o.get("uniqueItems") is not True:
        out.append(f"{path}: items must now be unique")
    if n.get("additionalProperties") is False and o.get("additionalProperties", True) is not False:
        out.append(f"{path}: additional properties are no longer allowed")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def render_schema(schema: Schema) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
