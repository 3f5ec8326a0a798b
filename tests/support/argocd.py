"""Running Argo CD's Lua scripts (health checks, actions) the way Argo CD does, in a real Lua 5.1.

The YAML/JSON object becomes a Lua table literal (JSON-like: objects with string keys, 1-based
arrays, null fields absent, every number a Lua number); the script runs with the global ``obj`` in
a sandbox with only the libraries Argo CD's VM opens (``argocd_lua.lua`` beside this module), and
its result comes back as JSON. Used by the Lua tests and by the tests that run an action on a live
object.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).resolve().parent / "argocd_lua.lua"
#: the StreamingQuery actions' folder
QUERY_ACTIONS = REPO / "argocd" / "resource_customizations" / "sluice.dev" / "StreamingQuery" / "actions"


class LuaError(Exception):
    """The script failed in the interpreter, or returned something that is not a table."""


def lua_string(text: str) -> str:
    """A Lua 5.1 string literal of ``text`` (UTF-8 bytes; anything but printable ASCII escaped
    as a three-digit decimal escape, so that no following digit can extend it)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in ('"', "\\") or byte < 32 or byte > 126:
            out.append(f"\\{byte:03d}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def lua_literal(value: Any) -> str:
    """``value`` (parsed JSON/YAML) as a Lua table constructor, the way Argo CD decodes objects into
    its VM: maps with string keys, lists 1-based, nulls absent (a null in a map drops the key),
    numbers all Lua numbers."""
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if abs(value) >= 2**53:
            raise ValueError(f"{value} does not fit a Lua 5.1 number exactly")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} cannot be a Kubernetes object's number")
        return repr(value)
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, list):
        if any(item is None for item in value):
            raise ValueError("a null inside a list has no Lua table equivalent")
        return "{" + ", ".join(lua_literal(item) for item in value) + "}"
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"map key {key!r} is not a string")
            if item is not None:
                items.append(f"[{lua_string(key)}] = {lua_literal(item)}")
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"cannot convert {type(value).__name__} to Lua")


def run_script(lua: Path, script: Path, obj: Any, tmp_path: Path, frozen: dt.datetime | None = None) -> Any:
    """What ``script`` returns for the global ``obj``, decoded from the harness's JSON."""
    literal = tmp_path / f"obj-{script.parent.name}-{script.stem}.lua"
    literal.write_text("return " + lua_literal(obj) + "\n", encoding="utf-8")
    argv = [str(lua), str(HARNESS), str(script), str(literal)]
    if frozen is not None:
        argv.append(str(int(frozen.timestamp())))
    result = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    if result.returncode != 0:
        raise LuaError(f"{script.relative_to(REPO) if script.is_relative_to(REPO) else script}: "
                       f"{result.stderr.decode('utf-8', 'replace').strip()}")
    return json.loads(result.stdout.decode("utf-8"))


def clean_returned(new: Any, old: Any) -> Any:
    """Argo CD's ``cleanReturnedObj``: an object that came back as an empty table (encoded as an
    empty array) is the empty object it was."""
    if isinstance(new, dict) and isinstance(old, dict):
        out = dict(new)
        for key, before in old.items():
            if key not in new:
                continue
            after = new[key]
            if isinstance(after, list) and isinstance(before, dict) and not after:
                out[key] = before
            else:
                out[key] = clean_returned(after, before)
        return out
    if isinstance(new, list) and isinstance(old, list):
        return [clean_returned(item, old[i]) if i < len(old) else item for i, item in enumerate(new)]
    return new
