"""``sluice-runtime purge``: which prefixes it refuses, and its summary (the store is a local
directory here; the s3a store is tested against s3proxy in tests/integration/test_purge_real.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sluice_runtime import checkpointstore as cs
from sluice_runtime.purge import PurgeRefused, check_prefix, purge, spark_settings


@pytest.mark.parametrize("prefix", [
    "s3a://bucket", "s3a://bucket/", "s3a://bucket/root", "s3a://bucket/root/svc",
    "s3a://bucket/root/svc/../q", "/state/shop/ns/q", "file:///state/shop/ns/q",
])
def test_anything_but_a_querys_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(PurgeRefused, match="--prefix"):
        check_prefix(prefix)


def test_a_querys_prefix_is_accepted_without_its_trailing_slash() -> None:
    assert check_prefix("s3a://bucket/svc/ns/q/") == "s3a://bucket/svc/ns/q"
    assert check_prefix("s3a://bucket/root/deeper/svc/ns/q") == "s3a://bucket/root/deeper/svc/ns/q"


def test_settings_are_the_drivers_object_store_settings_and_never_the_keys() -> None:
    env = {"SLUICE_S3_ENDPOINT": "http://store:9000", "SLUICE_S3_PATH_STYLE": "true",
           "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "secret"}
    conf = spark_settings("s3a://b/svc/ns/q", env, ["/jars/a.jar", "/jars/b.jar"])
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://store:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.jars"] == "/jars/a.jar,/jars/b.jar"
    assert "secret" not in json.dumps(conf) and "AKIA" not in json.dumps(conf)


def test_purge_counts_what_was_there_and_what_is_left(tmp_path: Path) -> None:
    query = tmp_path / "svc" / "ns" / "q"
    for rel in ("v1/offsets/0", "v1/commits/0", "v2/state/0/0/1.zip"):
        (query / rel).parent.mkdir(parents=True, exist_ok=True)
        (query / rel).write_bytes(b"abc")
    (tmp_path / "svc" / "ns" / "q2").mkdir()
    summary = purge(cs.LOCAL, str(query))
    assert (summary.objects, summary.bytes, summary.left) == (3, 9, 0)
    assert not query.exists() and (tmp_path / "svc" / "ns" / "q2").is_dir()
    assert purge(cs.LOCAL, str(query)).objects == 0
    assert json.loads(summary.to_json())["prefix"] == str(query)
