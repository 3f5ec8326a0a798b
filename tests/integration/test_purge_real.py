"""``sluice-runtime purge``, the object-store half of ``deletionPolicy: Delete``: a real s3proxy,
the real S3A client in a real PySpark JVM, run as the operator's purge pod runs it (a process with
the drivers' object-store environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ObjectStore
from tests.support.runtime import unique

pytestmark = pytest.mark.integration


def run_purge(objectstore: ObjectStore, jars: list[Path], prefix: str, *,
              secret: str | None = None) -> tuple[int, str]:
    # as in a pod: no PYSPARK_SUBMIT_ARGS (the test session's --jars would replace spark.jars)
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"},
           "SLUICE_S3_ENDPOINT": objectstore.endpoint, "SLUICE_S3_PATH_STYLE": "true",
           "AWS_ACCESS_KEY_ID": objectstore.access_key,
           "AWS_SECRET_ACCESS_KEY": secret or objectstore.secret_key}
    done = subprocess.run([sys.executable, "-m", "sluice_runtime.cli", "purge", "--prefix", prefix,
                           "--jars", ",".join(map(str, jars))],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    return done.returncode, done.stdout + done.stderr


def last_json(output: str) -> dict[str, object]:
    line = next(ln for ln in reversed(output.splitlines()) if ln.startswith("{"))
    return dict(json.loads(line))


def test_purge_deletes_every_version_of_the_query_and_nothing_beside_it(
    objectstore: ObjectStore, s3a_jars: list[Path],
) -> None:
    s3, bucket = objectstore.client, objectstore.bucket
    root = unique("purge")
    mine = [f"{root}/svc/ns/q/v1/offsets/0", f"{root}/svc/ns/q/v1/commits/0",
            f"{root}/svc/ns/q/v2/epochs/1/_term", f"{root}/svc/ns/q/v2/state/0/0/1.zip"]
    beside = [f"{root}/svc/ns/q2/v1/offsets/0",  # a query whose name starts like it
              f"{root}/svc/ns/other/v1/offsets/0", f"{root}/svc/ns2/q/v1/offsets/0"]
    for key in mine + beside:
        assert s3.put(bucket, key, b"x" * 10).status == 200

    code, output = run_purge(objectstore, s3a_jars, f"s3a://{bucket}/{root}/svc/ns/q")
    assert code == 0, output
    summary = last_json(output)
    assert summary["objects"] == len(mine) and summary["left"] == 0 and summary["bytes"] == 40, summary
    assert sorted(s3.keys(bucket, f"{root}/")) == sorted(beside)

    # again: nothing there is nothing to do, and not an error
    code, output = run_purge(objectstore, s3a_jars, f"s3a://{bucket}/{root}/svc/ns/q/")
    assert code == 0, output
    assert last_json(output)["objects"] == 0


def test_purge_refuses_what_is_not_a_querys_prefix_before_starting_spark(
    objectstore: ObjectStore, s3a_jars: list[Path],
) -> None:
    for prefix in (f"s3a://{objectstore.bucket}", f"s3a://{objectstore.bucket}/root/svc",
                   "/state/svc/ns/q", f"s3a://{objectstore.bucket}/root/svc/../q"):
        code, output = run_purge(objectstore, s3a_jars, prefix)
        assert code == 2, output
        assert "--prefix" in str(last_json(output)["error"]), output


def test_purge_with_a_wrong_key_fails_and_says_why(objectstore: ObjectStore, s3a_jars: list[Path]) -> None:
    root = unique("purge")
    key = f"{root}/svc/ns/q/v1/offsets/0"
    assert objectstore.client.put(objectstore.bucket, key, b"x").status == 200
    code, output = run_purge(objectstore, s3a_jars, f"s3a://{objectstore.bucket}/{root}/svc/ns/q",
                             secret="not-the-secret")
    assert code == 1, output
    error = str(last_json(output)["error"])
    assert "403" in error or "Forbidden" in error or "AccessDenied" in error or "Signature" in error, error
    assert list(objectstore.client.keys(objectstore.bucket, f"{root}/")) == [key]  # nothing lost
