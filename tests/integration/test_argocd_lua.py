"""The Argo CD health checks and actions under argocd/, run in a real Lua 5.1 interpreter.

Argo CD evaluates them in gopher-lua (Lua 5.1). Every ``health_test.yaml`` and ``action_test.yaml``
under ``argocd/resource_customizations`` is run the way Argo CD's own tests run them
(``util/lua/health_test.go``, ``custom_actions_test.go``), in Debian's ``lua5.1``: the YAML input
becomes a Lua table (JSON-like: objects with string keys, 1-based arrays, null fields absent,
every number a Lua number), the script runs with the global ``obj`` in a sandbox with only the
libraries Argo CD's VM opens (``tests/support/argocd_lua.lua``), and its result comes back as JSON.

Health results are compared exactly (status and message). Discovery results are compared as a set
of actions (name, disabled, iconClass, displayName). Action results get Argo CD's clean-up of
empty tables (``cleanReturnedObj``) and must equal the expected object. The restart and rollback
actions write the current time: their file tests run with the harness's clock frozen at
``FROZEN_TIME``, and one test each runs them on the real clock.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from sluice.core.rollback import ROLLBACK_REQUEST, UNDONE_STEPS
from sluice.crd.querycluster import QueryCluster, QueryClusterStatus
from sluice.crd.streamingquery import StreamingQuery, StreamingQueryStatus
from sluice_dev.platform import debian
from sluice_dev.platform import lua as lua_platform
from sluice_dev.platform.common import PlatformError
from sluice_dev.platform.lua import ensure_lua

from tests.support.argocd import LuaError, clean_returned, run_script

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CUSTOMIZATIONS = REPO / "argocd" / "resource_customizations"
#: the instant the harness freezes the Lua clock at for the action files (restart's nonce)
FROZEN_TIME = dt.datetime(2026, 3, 7, 12, 0, 0, tzinfo=dt.UTC)
#: Argo CD's health statuses (gitops-engine pkg/health); anything else becomes Unknown
HEALTH_STATUSES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")
INVALID_HEALTH = "Lua returned an invalid health status"
#: testdata whose spec is invalid on purpose (only their status is checked against the models)
INVALID_SPECS = {"sluice.dev/QueryCluster/testdata/invalid.yaml"}
MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "StreamingQuery": (StreamingQuery, StreamingQueryStatus),
    "QueryCluster": (QueryCluster, QueryClusterStatus),
}


class _Loader(yaml.SafeLoader):
    """YAML as Argo CD reads it (sigs.k8s.io/yaml): timestamps stay strings."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_Loader)  # a SafeLoader subclass


# -- Argo CD's reading of the results ----------------------------------------------------------

def health_of(result: Any) -> dict[str, str]:
    """The HealthStatus Argo CD makes of a health script's table (an unknown status is Unknown)."""
    if not isinstance(result, dict):
        result = {}  # an empty table encodes as []: no status, no message
    status, message = str(result.get("status", "")), str(result.get("message", ""))
    if status not in HEALTH_STATUSES:
        return {"status": "Unknown", "message": INVALID_HEALTH}
    return {"status": status, "message": message}


def assert_health(result: Any, expected: dict[str, Any]) -> None:
    want = {"status": str(expected.get("status", "")), "message": str(expected.get("message", ""))}
    got = health_of(result)
    assert got == want, f"health: got {got}, expected {want}"


def actions_of(result: Any) -> list[dict[str, Any]]:
    """The ResourceActions Argo CD makes of a discovery script's table."""
    if result == []:
        return []
    assert isinstance(result, dict), f"discovery returned {result!r}"
    actions = []
    for name, value in result.items():
        spec = value if isinstance(value, dict) else {}
        disabled = spec.get("disabled")
        actions.append(normalized_action({**spec, "name": name,
                                          "disabled": disabled if isinstance(disabled, bool) else False}))
    return actions


def normalized_action(action: dict[str, Any]) -> dict[str, Any]:
    return {"name": action.get("name"), "disabled": bool(action.get("disabled", False)),
            "iconClass": action.get("iconClass", ""), "displayName": action.get("displayName", ""),
            "params": action.get("params")}


def assert_discovery(result: Any, expected: list[dict[str, Any]]) -> None:
    got = sorted(actions_of(result), key=lambda a: str(a["name"]))
    want = sorted((normalized_action(a) for a in expected), key=lambda a: str(a["name"]))
    assert got == want, f"discovery: got {got}, expected {want}"


def assert_same_object(got: Any, expected: Any, what: str) -> None:
    if got != expected:
        diff = difflib.unified_diff(
            yaml.safe_dump(expected, sort_keys=True).splitlines(),
            yaml.safe_dump(got, sort_keys=True).splitlines(), "expected", "got", lineterm="")
        raise AssertionError(f"{what}: the result differs from the expected object:\n" + "\n".join(diff))


# -- collection ---------------------------------------------------------------------------------

def _rel(path: Path) -> str:
    return path.relative_to(CUSTOMIZATIONS).as_posix()


def health_cases() -> list[Any]:
    cases = []
    for test_file in sorted(CUSTOMIZATIONS.rglob("health_test.yaml")):
        for test in load_yaml(test_file)["tests"]:
            cases.append(pytest.param(test_file.parent, test, id=_rel(test_file.parent / test["inputPath"])))
    return cases


def discovery_cases() -> list[Any]:
    cases = []
    for test_file in sorted(CUSTOMIZATIONS.rglob("action_test.yaml")):
        for test in load_yaml(test_file).get("discoveryTests") or []:
            cases.append(pytest.param(test_file.parent, test,
                                      id=_rel(test_file.parent / test["inputPath"])))
    return cases


def action_cases() -> list[Any]:
    cases = []
    for test_file in sorted(CUSTOMIZATIONS.rglob("action_test.yaml")):
        for test in load_yaml(test_file).get("actionTests") or []:
            cases.append(pytest.param(test_file.parent, test, id=f"{_rel(test_file.parent)}/{test['action']}:"
                                      f"{test['inputPath']}"))
    return cases


HEALTH_SCRIPTS = sorted(CUSTOMIZATIONS.rglob("health.lua"))
ACTION_DIRS = sorted(p.parent for p in CUSTOMIZATIONS.rglob("discovery.lua"))


@pytest.fixture(scope="module")
def lua() -> Path:
    try:
        return ensure_lua()
    except PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)


# -- the upstream-format tests --------------------------------------------------------------------

@pytest.mark.parametrize(("folder", "test"), health_cases())
def test_health(lua: Path, tmp_path: Path, folder: Path, test: dict[str, Any]) -> None:
    obj = load_yaml(folder / test["inputPath"])
    assert_health(run_script(lua, folder / "health.lua", obj, tmp_path), test["healthStatus"])


@pytest.mark.parametrize(("folder", "test"), discovery_cases())
def test_action_discovery(lua: Path, tmp_path: Path, folder: Path, test: dict[str, Any]) -> None:
    obj = load_yaml(folder / test["inputPath"])
    assert_discovery(run_script(lua, folder / "discovery.lua", obj, tmp_path), test["result"])


@pytest.mark.parametrize(("folder", "test"), action_cases())
def test_action(lua: Path, tmp_path: Path, folder: Path, test: dict[str, Any]) -> None:
    obj = load_yaml(folder / test["inputPath"])
    result = run_script(lua, folder / test["action"] / "action.lua", obj, tmp_path, frozen=FROZEN_TIME)
    assert isinstance(result, dict), f"expected the patched object, got {result!r}"
    expected = load_yaml(folder / test["expectedOutputPath"])
    assert_same_object(clean_returned(result, obj), expected, f"{test['action']} on {test['inputPath']}")


# -- beyond the files ------------------------------------------------------------------------------

def test_every_kind_and_action_is_covered() -> None:
    """Each health.lua has its tests; each action folder has a test and is offered by discovery;
    every testdata file is used by some test."""
    assert {p.parent.name for p in HEALTH_SCRIPTS} == {"StreamingQuery", "QueryCluster"}
    used: set[Path] = set()
    for script in HEALTH_SCRIPTS:
        tests = load_yaml(script.parent / "health_test.yaml")["tests"]
        assert tests, script
        statuses = {t["healthStatus"]["status"] for t in tests}
        assert statuses <= set(HEALTH_STATUSES), statuses
        assert {"Healthy", "Progressing", "Degraded"} <= statuses, f"{_rel(script)} lacks a state: {statuses}"
        used |= {(script.parent / t["inputPath"]).resolve() for t in tests}
    for folder in ACTION_DIRS:
        spec = load_yaml(folder / "action_test.yaml")
        actions = {p.name for p in folder.iterdir() if (p / "action.lua").is_file()}
        assert {t["action"] for t in spec["actionTests"]} == actions
        for test in spec["discoveryTests"]:
            assert {a["name"] for a in test["result"]} == actions
            used.add((folder / test["inputPath"]).resolve())
        for test in spec["actionTests"]:
            used |= {(folder / test["inputPath"]).resolve(), (folder / test["expectedOutputPath"]).resolve()}
    files = {p.resolve() for p in CUSTOMIZATIONS.rglob("testdata/*.yaml")}
    assert files - used == set(), f"testdata no test uses: {sorted(_rel(p) for p in files - used)}"
    assert not (used - files), f"tests refer to missing files: {sorted(str(p) for p in used - files)}"


@pytest.mark.parametrize("script", HEALTH_SCRIPTS, ids=[_rel(p) for p in HEALTH_SCRIPTS])
@pytest.mark.parametrize("status", ["absent", "empty", "null"])
def test_health_without_status(lua: Path, tmp_path: Path, script: Path, status: str) -> None:
    """Any object straight from Git (no status, ``status: {}`` or ``status: null``, no generation
    either) gets a valid status: Progressing, never a Lua error."""
    obj: dict[str, Any] = {"apiVersion": "sluice.dev/v1alpha1", "kind": script.parent.name,
                           "metadata": {"name": "x", "namespace": "y"}, "spec": {}}
    if status == "empty":
        obj["status"] = {}
    elif status == "null":
        obj["status"] = None
    result = run_script(lua, script, obj, tmp_path)
    assert health_of(result)["status"] == "Progressing", result
    assert health_of(result)["message"], result


@pytest.mark.parametrize("script", HEALTH_SCRIPTS, ids=[_rel(p) for p in HEALTH_SCRIPTS])
def test_health_of_odd_statuses(lua: Path, tmp_path: Path, script: Path) -> None:
    """Partial or odd statuses (no conditions, conditions not a list of maps, no spec, a status
    of an older generation without conditions) never make the script fail."""
    odd: list[dict[str, Any]] = [
        {"observedGeneration": 1},
        {"phase": "Running"},
        {"observedGeneration": 1, "conditions": []},
        {"observedGeneration": 1, "conditions": [{"type": "Ready"}]},
        {"observedGeneration": 1, "conditions": [{}], "rollout": {}, "lastUpgrade": {}},
        {"observedGeneration": 1, "rollout": {"step": "Verifying"}},
        {"observedGeneration": 1, "lastUpgrade": {"outcome": "RolledBack", "generation": 1}},
        {"observedGeneration": 1, "lastUpgrade": {"outcome": "Failed", "generation": 1, "error": {}}},
        {"observedGeneration": 1, "rollout": {"step": "Rejected"}},
        {"observedGeneration": 1, "rollout": {"step": "AwaitingUpgrade"}},
        {"observedGeneration": 1, "lastCompileError": {}},
        {"observedGeneration": 1, "phase": "Degraded"},
    ]
    for status in odd:
        for meta in ({"name": "x", "generation": 1}, {"name": "x"}):
            obj = {"kind": script.parent.name, "metadata": meta, "status": status}
            result = health_of(run_script(lua, script, obj, tmp_path))
            assert result["status"] in HEALTH_STATUSES[:4], (status, result)
            assert result["message"], (status, result)


def test_restart_on_the_real_clock(lua: Path, tmp_path: Path) -> None:
    """Unfrozen, restart writes the current UTC time (RFC 3339, seconds) and changes nothing else."""
    folder = CUSTOMIZATIONS / "sluice.dev" / "StreamingQuery" / "actions"
    obj = load_yaml(folder / "testdata" / "running.yaml")
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    result = run_script(lua, folder / "restart" / "action.lua", obj, tmp_path)
    after = dt.datetime.now(dt.UTC)
    nonce = result["spec"].pop("restartNonce")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", nonce), nonce
    assert len(nonce) <= 63
    assert before <= dt.datetime.strptime(nonce, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC) <= after
    assert_same_object(clean_returned(result, obj), obj, "restart")


def test_rollback_on_the_real_clock(lua: Path, tmp_path: Path) -> None:
    """Unfrozen, rollback writes the current UTC time into its request annotation and changes
    nothing else (the spec stays: the operator patches it, from the previous plan's ConfigMap)."""
    folder = CUSTOMIZATIONS / "sluice.dev" / "StreamingQuery" / "actions"
    obj = load_yaml(folder / "testdata" / "running.yaml")
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    result = run_script(lua, folder / "rollback" / "action.lua", obj, tmp_path)
    after = dt.datetime.now(dt.UTC)
    request = result["metadata"]["annotations"].pop(ROLLBACK_REQUEST)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", request), request
    assert before <= dt.datetime.strptime(request, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC) <= after
    assert_same_object(clean_returned(result, obj), obj, "rollback")


def test_the_lua_steps_a_rollback_undoes_are_the_operators() -> None:
    """discovery.lua offers rollback during a rollout in the steps whose edit the operator's
    rollback undoes: its list is sluice.core.rollback.UNDONE_STEPS."""
    text = (CUSTOMIZATIONS / "sluice.dev" / "StreamingQuery" / "actions" / "discovery.lua").read_text()
    found = re.search(r"local undone = \{(.*?)\}", text, re.S)
    assert found, "discovery.lua has no `local undone = {...}`"
    assert set(re.findall(r"(\w+) = true", found.group(1))) == set(UNDONE_STEPS)


def test_actions_on_an_object_without_spec(lua: Path, tmp_path: Path) -> None:
    folder = CUSTOMIZATIONS / "sluice.dev" / "StreamingQuery" / "actions"
    obj = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery", "metadata": {"name": "x"}}
    assert run_script(lua, folder / "suspend" / "action.lua", obj, tmp_path)["spec"] == {"suspend": True}
    assert run_script(lua, folder / "resume" / "action.lua", obj, tmp_path)["spec"] == {"suspend": False}
    restarted = run_script(lua, folder / "restart" / "action.lua", obj, tmp_path, frozen=FROZEN_TIME)
    assert restarted["spec"] == {"restartNonce": "2026-03-07T12:00:00Z"}
    asked = run_script(lua, folder / "rollback" / "action.lua", obj, tmp_path, frozen=FROZEN_TIME)
    assert asked["metadata"] == {"name": "x", "annotations": {ROLLBACK_REQUEST: "2026-03-07T12:00:00Z"}}
    # as for a running query, but with no status there is no previous plan to roll back to
    running = load_yaml(folder / "action_test.yaml")["discoveryTests"][0]["result"]
    expected = [{**a, "disabled": True} if a["name"] == "rollback" else a for a in running]
    assert_discovery(run_script(lua, folder / "discovery.lua", obj, tmp_path), expected)


# -- the testdata are real objects --------------------------------------------------------------

def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is not None:  # list[X], X | None, Literal[...], dict[...]
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def unknown_fields(model: type[BaseModel], data: Any, path: str) -> list[str]:
    """Keys of ``data`` that ``model`` (recursively) does not know by their API (camelCase) names:
    the status models ignore unknown fields, so a misspelt one would pass their validation."""
    if not isinstance(data, dict):
        return []
    fields = {(info.alias or name): info for name, info in model.model_fields.items()}
    out = []
    for key, value in data.items():
        info = fields.get(key)
        if info is None:
            out.append(f"{path}.{key}")
            continue
        for sub in _models_in(info.annotation):
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                where = f"{path}.{key}[{i}]" if isinstance(value, list) else f"{path}.{key}"
                out += unknown_fields(sub, item, where)
    return out


TESTDATA = sorted(CUSTOMIZATIONS.rglob("testdata/*.yaml"))


@pytest.mark.parametrize("path", TESTDATA, ids=[_rel(p) for p in TESTDATA])
def test_testdata_is_a_valid_object(path: Path) -> None:
    """Each input is an object the operator could have written: the CRD model validates it and its
    status uses only the status model's field names."""
    obj = load_yaml(path)
    model, status_model = MODELS[obj["kind"]]
    assert obj["apiVersion"] == "sluice.dev/v1alpha1"
    if _rel(path) not in INVALID_SPECS:
        model.model_validate(obj)
    status = obj.get("status")
    if status is not None:
        status_model.model_validate(status)
        assert unknown_fields(status_model, status, "status") == []


# -- the harness can fail -------------------------------------------------------------------------

def test_harness_reports_lua_errors(lua: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.lua"
    broken.write_text("local hs = {}\nhs.status = obj.status.phase\nreturn hs\n")
    with pytest.raises(LuaError, match="attempt to index field 'status'"):
        run_script(lua, broken, {"metadata": {}}, tmp_path)
    not_a_table = tmp_path / "string.lua"
    not_a_table.write_text('return "Healthy"\n')
    with pytest.raises(LuaError, match="expect table output"):
        run_script(lua, not_a_table, {}, tmp_path)


def test_harness_has_only_argo_cds_libraries(lua: Path, tmp_path: Path) -> None:
    """No string or math library (Argo CD's VM opens neither), but table and a safe os."""
    for name, body in {"method": 'return {status = ("Healthy"):lower()}',
                       "string": "return {status = string.lower('Healthy')}",
                       "math": "return {n = math.floor(1.5)}",
                       "io": "return {f = io.open('/etc/hostname')}",
                       "require": "return {m = require('string')}"}.items():
        script = tmp_path / f"uses-{name}.lua"
        script.write_text(body + "\n")
        with pytest.raises(LuaError):
            run_script(lua, script, {}, tmp_path)
    allowed = tmp_path / "allowed.lua"
    allowed.write_text('local os = require("os")\nlocal t = {}\ntable.insert(t, os.date("!%Y", 0))\n'
                       'return {year = table.concat(t), now = os.time()}\n')
    result = run_script(lua, allowed, {}, tmp_path, frozen=FROZEN_TIME)
    assert result == {"year": "1970", "now": int(FROZEN_TIME.timestamp())}


def test_objects_reach_lua_intact(lua: Path, tmp_path: Path) -> None:
    """Escaping, nesting, numbers and nulls survive YAML -> Lua table -> JSON (``return obj``)."""
    identity = tmp_path / "identity.lua"
    identity.write_text("return obj\n")
    obj: dict[str, Any] = {
        "quotes": 'a "b" \\c\\ \'d\'', "lines": "SELECT 1\n\tFROM t\r\n",
        "unicode": "Größe → 数据 \U0001F600",
        "control": "\x00\x01\x1f\x7f", "digits": "\\0\n1", "lua": "]] [[ ]=] --",
        "ints": [0, -1, 2**53 - 1], "floats": [1.84, -0.5, 1e-7, 123456789.125],
        "bools": [True, False], "nested": [[{"a": [1, [2, {"b": None, "c": "x"}]]}], []],
        "empty": {}, "null": None,
    }
    result = run_script(lua, identity, obj, tmp_path)
    expected = json.loads(json.dumps(obj))
    del expected["null"]
    expected["nested"][0][0]["a"][1][1] = {"c": "x"}
    assert clean_returned(result, obj) == expected


def test_a_wrong_expectation_fails(lua: Path, tmp_path: Path) -> None:
    """The comparisons are not vacuous: each one rejects a changed expectation."""
    case = health_cases()[0].values
    folder, test = case
    result = run_script(lua, folder / "health.lua", load_yaml(folder / test["inputPath"]), tmp_path)
    assert_health(result, test["healthStatus"])
    for changed in ({**test["healthStatus"], "status": "Healthy"},
                    {**test["healthStatus"], "message": test["healthStatus"]["message"] + "."}):
        with pytest.raises(AssertionError):
            assert_health(result, changed)
    folder, test = discovery_cases()[0].values
    found = run_script(lua, folder / "discovery.lua", load_yaml(folder / test["inputPath"]), tmp_path)
    flipped = [{**a, "disabled": not a.get("disabled", False)} if a["name"] == "resume" else a
               for a in test["result"]]
    with pytest.raises(AssertionError):
        assert_discovery(found, flipped)
    with pytest.raises(AssertionError):
        assert_discovery(found, test["result"][:-1])
    folder, test = action_cases()[0].values
    obj = load_yaml(folder / test["inputPath"])
    patched = clean_returned(run_script(lua, folder / test["action"] / "action.lua", obj, tmp_path), obj)
    with pytest.raises(AssertionError):
        assert_same_object(patched, obj, "unchanged input")


# -- installing the interpreter ------------------------------------------------------------------

class _Apt:
    """Stands in for apt-get: records the commands, fails the ones told to, "installs" lua5.1."""

    def __init__(self, fail: set[str], installs: Path | None) -> None:
        self.fail = fail
        self.installs = installs
        self.calls: list[str] = []
        self.installed: Path | None = None

    def run_logged(self, component: str, argv: list[str], *, log_path: Path, **_: Any) -> None:
        verb = next(a for a in argv if a in ("install", "update"))
        self.calls.append(verb)
        if verb in self.fail:
            self.fail.discard(verb)
            raise PlatformError(component, f"`apt-get {verb}` failed", log_path)
        if verb == "install":
            self.installed = self.installs

    def find(self) -> Path | None:
        return self.installed


@pytest.mark.parametrize(("fail", "installs", "calls", "error"), [
    (set(), Path("/usr/bin/lua5.1"), ["install"], None),
    ({"install"}, Path("/usr/bin/lua5.1"), ["install", "update", "install"], None),
    ({"install", "update"}, None, ["install", "update"], "could not install lua5.1 with apt-get"),
    (set(), None, ["install"], "lua5.1 is still missing after apt-get install lua5.1"),
])
def test_ensure_lua_installs_with_apt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fail: set[str],
                                      installs: Path | None, calls: list[str], error: str | None) -> None:
    """apt-get install first, apt-get update only when that fails; a failure names lua5.1 and the
    apt log."""
    apt = _Apt(set(fail), installs)
    monkeypatch.setattr(lua_platform, "find_lua", apt.find)
    monkeypatch.setattr(debian, "run_logged", apt.run_logged)
    monkeypatch.setattr(debian, "cache_dir", lambda component, version: tmp_path)
    monkeypatch.setattr(debian.os, "geteuid", lambda: 0)
    monkeypatch.setattr(debian.shutil, "which", lambda name: f"/usr/bin/{name}")
    if error is None:
        assert ensure_lua(log=lambda line: None) == installs
    else:
        with pytest.raises(PlatformError) as raised:
            ensure_lua(log=lambda line: None)
        assert error in str(raised.value)
        assert str(tmp_path / "apt.log") in str(raised.value)
    assert apt.calls == calls
