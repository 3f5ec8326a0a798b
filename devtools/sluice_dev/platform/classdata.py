"""The driver JVM's class-data-sharing archive for JVMs started on this machine (tests, benchmarks,
a local ``sluice-runtime run``), as the runtime image makes its own at build time
(:mod:`sluice_runtime.classdata`).

An archive is only used by the JVM build and the class path it was written with, so the cache key
hashes what decides both: ``java -version``'s text, PySpark's version, the names, sizes and
modification times of the files in PySpark's ``jars/`` directory (so also the virtualenv: pip
gives installed files their install time), and the text of the workload module. A new JDK,
PySpark or virtualenv writes a new archive (``~/.cache/sluice/classdata-<key>/``, about a minute
and 170 MB once); a stale one is never mapped. Each use marks its directory; beyond the
:data:`KEEP` most recently used, archives are removed (:func:`prune`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from sluice_runtime import classdata

from sluice_dev.platform import sparkjars
from sluice_dev.platform.common import PlatformError, cache_dir, file_lock, run_logged

COMPONENT = "classdata"
ARCHIVE = "spark-driver.jsa"
#: archives kept in the cache (those of the most recently used virtualenvs)
KEEP = 3


def cache_key(java_version: str, pyspark_dir: Path, workload: bytes) -> str:
    """The hash of what decides whether an archive may be mapped (and what it holds)."""
    digest = hashlib.sha256(java_version.encode())
    digest.update(f"{pyspark_dir}\n".encode())
    for jar in sorted((pyspark_dir / "jars").iterdir()):
        stat = jar.stat()
        digest.update(f"{jar.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    version_file = pyspark_dir / "version.py"
    if version_file.is_file():
        digest.update(version_file.read_bytes())
    digest.update(workload)
    return digest.hexdigest()[:16]


def _java_version(java: str) -> str:
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise PlatformError(COMPONENT, f"`{java} -version` failed: {exc}") from exc
    return done.stderr


def provision(env: Mapping[str, str], java: str = "java") -> Path:
    """The archive for this machine's ``java`` and PySpark, written once under the cache (a file
    lock keeps concurrent test workers from writing it twice). ``env``: the environment of the
    JVM that writes it (its ``SPARK_SUBMIT_OPTS`` apply, less any archive option)."""
    pyspark_dir = sparkjars.pyspark_jars_dir().parent
    workload = Path(classdata.__file__).read_bytes()
    directory = cache_dir(COMPONENT, cache_key(_java_version(java), pyspark_dir, workload))
    archive = directory / ARCHIVE
    with file_lock(directory / ".lock"):
        if not archive.is_file():
            run_logged(COMPONENT, [sys.executable, "-m", "sluice_runtime.classdata",
                                   "--output", str(archive)],
                       log_path=directory / "classdata.log", env=env, timeout=600)
        os.utime(directory)  # used now
    prune(directory.parent)
    return archive


def prune(cache: Path, keep: int = KEEP) -> list[Path]:
    """Remove the archives' directories in ``cache`` beyond the ``keep`` most recently used; the
    removed ones. A JVM that maps a removed archive keeps its mapping; one that starts later
    without the file starts without class data sharing."""
    directories = sorted((d for d in cache.glob(f"{COMPONENT}-*") if d.is_dir()),
                         key=lambda d: d.stat().st_mtime, reverse=True)
    removed = directories[keep:]
    for directory in removed:
        shutil.rmtree(directory, ignore_errors=True)
    return removed
