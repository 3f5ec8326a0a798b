"""The dependency locks (requirements/*.txt) satisfy pyproject.toml and freeze the compiler.

Every requirement of each install target (the core dependencies, the target's extra with the
extras it names, the build backend) is pinned in the target's lock with a version it allows, and
with hashes; the images' locks run the versions of the dev lock (what CI tests); the compiler's
libraries (sqlglot, pydantic: compiled plans and their hashes depend on them) have one version
everywhere, sqlglot the exact pin of pyproject.toml. Regenerate with `make lock`.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from sluice_dev import locks

from tests.support import paths

REPO = paths.REPO
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: the libraries the compiler's output depends on
COMPILER_LIBRARIES = ("sqlglot", "pydantic")
#: the environment the locks are for (markers of requirements are evaluated in it)
ENVIRONMENT = {
    "python_version": locks.PYTHON_VERSION, "python_full_version": f"{locks.PYTHON_VERSION}.0",
    "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
    "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)\s*(?:\\)?$")
_FIX = "regenerate the locks with `make lock`"


def pins(name: str) -> dict[str, tuple[Version, int]]:
    """A lock's pins: canonical name -> (version, number of hashes)."""
    found: dict[str, tuple[Version, int]] = {}
    current: str | None = None
    for line in (REPO / locks.lock_path(name)).read_text().splitlines():
        stripped = line.strip()
        if match := _PIN.match(line):
            current = canonicalize_name(match.group(1))
            assert current not in found, f"{name}: {current} pinned twice"
            found[current] = (Version(match.group(2)), 0)
        elif stripped.startswith("--hash=sha256:") and current is not None:
            version, count = found[current]
            found[current] = (version, count + 1)
        elif stripped and not stripped.startswith("#"):
            raise AssertionError(f"{name}: unexpected line {line!r} (only exact pins with hashes)")
    return found


def requirements(extra: str) -> list[Requirement]:
    """What installing ``.[extra]`` (and building the project) requires, the project's own extras expanded."""
    wanted = [Requirement(r) for r in PROJECT["project"]["dependencies"]]
    wanted += [Requirement(r) for r in PROJECT["build-system"]["requires"]]
    todo, seen = [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in PROJECT["project"]["optional-dependencies"][name]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == canonicalize_name(PROJECT["project"]["name"]):
                todo.extend(requirement.extras)
            else:
                wanted.append(requirement)
    return [r for r in wanted if r.marker is None or r.marker.evaluate({**ENVIRONMENT, "extra": extra})]


@pytest.mark.parametrize(("name", "extra"), locks.LOCKS)
def test_lock_pins_every_requirement_with_an_allowed_version_and_hashes(name: str, extra: str) -> None:
    assert extra in PROJECT["project"]["optional-dependencies"]
    locked = pins(name)
    problems = []
    for requirement in requirements(extra):
        key = canonicalize_name(requirement.name)
        if key not in locked:
            problems.append(f"{requirement} is not pinned")
        elif not requirement.specifier.contains(locked[key][0], prereleases=True):
            problems.append(f"{requirement} is pinned to {locked[key][0]}, which it does not allow")
    problems += [f"{pkg}=={version} has no hash" for pkg, (version, hashes) in locked.items() if not hashes]
    assert not problems, f"{locks.lock_path(name)}: " + "; ".join(problems) + f": {_FIX}"


@pytest.mark.parametrize("name", [name for name, _ in locks.LOCKS if name != "dev"])
def test_image_locks_run_the_versions_ci_tests(name: str) -> None:
    dev = pins("dev")
    differ = [f"{pkg}: {version} here, {dev[pkg][0] if pkg in dev else 'absent'} in dev"
              for pkg, (version, _) in pins(name).items() if pkg not in dev or dev[pkg][0] != version]
    assert not differ, f"{locks.lock_path(name)}: " + "; ".join(differ) + f": {_FIX}"


def test_compiler_libraries_are_frozen() -> None:
    declared = {canonicalize_name(Requirement(r).name): Requirement(r)
                for r in PROJECT["project"]["dependencies"]}
    sqlglot = [spec for spec in declared["sqlglot"].specifier]
    assert [s.operator for s in sqlglot] == ["=="], "pyproject.toml pins sqlglot exactly (sqlglot==X.Y.Z)"
    for library in COMPILER_LIBRARIES:
        versions = {name: pins(name)[library][0] for name, _ in locks.LOCKS}
        assert len(set(versions.values())) == 1, f"{library} differs between the locks: {versions}"
    assert pins("dev")["sqlglot"][0] == Version(sqlglot[0].version), (
        f"the locks' sqlglot differs from pyproject.toml's exact pin {sqlglot[0].version}: {_FIX}")


def test_locks_are_written_by_the_pinned_tool_with_their_build_input() -> None:
    for name, _ in locks.LOCKS:
        text = (REPO / locks.lock_path(name)).read_text()
        assert text.startswith(locks.header(name, dict(locks.LOCKS)[name])), f"{name}: {_FIX}"
    assert (REPO / locks.BUILD_INPUT).read_text() == locks.build_input((REPO / "pyproject.toml").read_text())
