"""The checkpoint store's pure parts, its volume implementation, the object-store decisions of the
epochs (which source, which objects, what to prune) and the S3A settings derived from the
environment. The S3 implementation runs against s3proxy in
``tests/integration/test_runtime_objectstore.py``."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from sluice_runtime import checkpointstore as cs
from sluice_runtime import epochs
from sluice_runtime.cleanup import object_store_refusal
from sluice_runtime.cli import ConfigError, build_parser, resolve_config
from sluice_runtime.config import (
    DEFAULT_CREDENTIALS,
    ENV_CREDENTIALS,
    OBJECT_STORE_CHECKPOINT_MANAGER,
    ObjectStoreConfigError,
    object_store_conf,
)


def test_locations() -> None:
    assert cs.is_object_store("s3a://b/p") and not cs.is_object_store("/data/ck")
    assert cs.split_uri("s3a://bucket/a/b/") == ("bucket", "a/b")
    assert cs.split_uri("s3a://bucket") == ("bucket", "")
    with pytest.raises(ValueError):
        cs.split_uri("/data")
    assert cs.join("s3a://b/p/", "epochs", "3") == "s3a://b/p/epochs/3"
    assert cs.join(Path("/data/ck"), "offsets", "1") == "/data/ck/offsets/1"
    assert cs.parent("s3a://b/p/epochs/3") == "s3a://b/p/epochs" and cs.name("s3a://b/p/epochs/3/") == "3"


def test_the_local_store(tmp_path: Path) -> None:
    store = cs.LocalStore()
    base = str(tmp_path / "ck")
    assert store.names(base) == [] and store.listing(base) == [] and store.read(cs.join(base, "x")) is None
    assert store.create_if_absent(cs.join(base, "claim"), b"one")
    assert not store.create_if_absent(cs.join(base, "claim"), b"two")
    assert store.read(cs.join(base, "claim")) == b"one"
    store.write(cs.join(base, "offsets", "0"), b"abc")
    store.write(cs.join(base, "offsets", "0"), b"abcd")  # replaced, by rename
    assert store.copy(cs.join(base, "offsets", "0"), cs.join(str(tmp_path), "other", "0"))
    assert os.stat(cs.join(base, "offsets", "0")).st_ino == os.stat(tmp_path / "other" / "0").st_ino  # a link
    assert not store.copy(cs.join(base, "gone"), cs.join(str(tmp_path), "other", "gone"))
    assert [(e.key, e.size) for e in store.listing(base)] == [("claim", 3), ("offsets/0", 4)]
    assert store.names(base) == ["claim", "offsets"] and store.size(base) == 7
    assert store.exists(cs.join(base, "offsets", "0")) and store.mtime(cs.join(base, "offsets", "0"))
    store.delete(cs.join(base, "offsets", "0"))
    store.delete(cs.join(base, "offsets", "0"))  # gone already: fine
    store.delete_prefix(base)
    assert not Path(base).exists() and (tmp_path / "other" / "0").read_bytes() == b"abcd"


def test_a_local_location_gets_the_local_store_without_a_jvm() -> None:
    assert cs.store_for("/data/ck") is cs.LOCAL


def test_which_epoch_is_the_source() -> None:
    assert epochs.newest_source([], 1) is None
    assert epochs.newest_source([1, 2, 4], 4) == 2  # never the term itself or a later one
    assert epochs.newest_source([1, 2, 4], 9) == 4
    assert epochs.numbered(["1", "10", "2", "_term", ".3.staging"]) == [1, 2, 10]


def test_which_objects_make_an_epoch() -> None:
    keys = ["_ready", "_term", "metadata", "offsets/0", "commits/0", "state/0/0/1.zip",
            "state/0/0/_metadata/schema", "sources/0/0", "dlq/orders/offsets/0", "sluice/state.json",
            "offsets/.1.tmp", "epochs/1/metadata", "backstops.json"]
    from_epoch = epochs.copy_plan(keys, from_base=False)
    assert "_ready" not in from_epoch and "_term" not in from_epoch and "offsets/.1.tmp" not in from_epoch
    assert {"metadata", "offsets/0", "commits/0", "state/0/0/1.zip", "state/0/0/_metadata/schema",
            "sources/0/0", "dlq/orders/offsets/0", "sluice/state.json"} <= set(from_epoch)
    from_base = epochs.copy_plan(keys, from_base=True)
    assert "epochs/1/metadata" not in from_base and "backstops.json" not in from_base
    assert "metadata" in from_base


def test_an_epoch_copies_the_newest_entries_of_each_metadata_log_only() -> None:
    history = [f"{log}/{n}" for log in ("offsets", "commits", "dlq/orders/offsets", "dlq/orders/commits")
               for n in range(100, 0, -1)]
    keys = ["metadata", "sources/0/0", "state/0/0/99.zip", "state/0/0/100.zip", "dlq/orders/metadata",
            "offsets/.101.tmp", *history]
    plan = epochs.copy_plan(keys, from_base=False)
    assert [k for k in plan if k.startswith("offsets/")] == ["offsets/100", "offsets/98", "offsets/99"]
    assert [k for k in plan if k.startswith("commits/")] == ["commits/100", "commits/98", "commits/99"]
    assert [k for k in plan if k.startswith("dlq/orders/offsets/")] == [
        "dlq/orders/offsets/100", "dlq/orders/offsets/98", "dlq/orders/offsets/99"]
    # everything else whole: the state's versions are not a metadata log
    whole = {"metadata", "sources/0/0", "state/0/0/99.zip", "state/0/0/100.zip", "dlq/orders/metadata"}
    assert whole <= set(plan)
    assert len(plan) == 4 * epochs.LOG_ENTRIES_COPIED + 5
    assert len(epochs.copy_plan(keys, from_base=False, log_entries=100)) == len(keys) - 1  # the .tmp


def test_what_pruning_deletes() -> None:
    assert epochs.doomed([1, 2, 3, 4, 5], 5, kept=[]) == [1, 2, 3]  # 4 stays: a zombie may write there
    assert epochs.doomed([1, 2, 3, 4, 5], 5, kept=[2]) == [1, 3]
    assert epochs.doomed([5], 5, kept=[]) == [] and epochs.doomed([3, 5, 7], 5, kept=[]) == []
    assert epochs.doomed([1, 2, 3], 3, kept=[], keep_behind=0) == [1, 2]


def test_a_terms_record_names_its_holder() -> None:
    assert epochs.term_holder(epochs.term_record(3, "pod-a/x1", "T")) == "pod-a/x1"
    assert epochs.term_holder(b"not json") is None and epochs.term_holder(None) is None


def test_the_epoch_of_a_location_on_either_store(tmp_path: Path) -> None:
    base = "s3a://b/ck/q-v1"
    assert epochs.epoch_at(base, 3) == "s3a://b/ck/q-v1/epochs/3"
    assert epochs.epoch_of("s3a://b/ck/q-v1/epochs/3", base) == 3
    assert epochs.epoch_of(base, base) is None and epochs.epoch_of("s3a://b/ck/q-v2/epochs/3", base) is None
    assert epochs.epoch_at(tmp_path, 3) == tmp_path / "epochs" / "3"


def test_clean_up_on_an_object_store_removes_siblings_only() -> None:
    own = "s3a://b/ck/q-v2"
    assert object_store_refusal("s3a://b/ck/q-v1", own) is None
    assert object_store_refusal("s3a://b/ck/q-v2", own) is not None  # its own
    assert object_store_refusal("s3a://b/ck/q-v2/epochs/1", own) is not None
    assert object_store_refusal("s3a://other/ck/q-v1", own) is not None  # another bucket
    assert object_store_refusal("s3a://b/elsewhere/q-v1", own) is not None
    assert object_store_refusal("s3a://b/ck/../x", own) is not None
    assert object_store_refusal("/data/ck/q-v1", own) is not None


def test_s3a_settings_from_the_environment() -> None:
    assert object_store_conf("/data/ck", {"SLUICE_S3_ENDPOINT": "http://x"}) == {}
    aws = object_store_conf("s3a://b/p", {})
    assert aws["spark.sql.streaming.checkpointFileManagerClass"] == OBJECT_STORE_CHECKPOINT_MANAGER
    assert aws["spark.hadoop.fs.s3a.aws.credentials.provider"] == DEFAULT_CREDENTIALS
    assert aws["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert "spark.hadoop.fs.s3a.endpoint" not in aws and "spark.hadoop.fs.s3a.endpoint.region" not in aws
    env = {"SLUICE_S3_ENDPOINT": "http://10.0.0.1:9000", "SLUICE_S3_PATH_STYLE": "True",
           "SLUICE_S3_REGION": "eu-1", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}
    local = object_store_conf("s3a://b/p", env)
    assert local["spark.hadoop.fs.s3a.endpoint"] == "http://10.0.0.1:9000"
    assert local["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert local["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert local["spark.hadoop.fs.s3a.endpoint.region"] == "eu-1"
    assert local["spark.hadoop.fs.s3a.aws.credentials.provider"] == f"{ENV_CREDENTIALS},{DEFAULT_CREDENTIALS}"
    assert "AK" not in local.values() and "SK" not in local.values()  # the keys stay in the environment
    assert object_store_conf("s3a://b/p", {"SLUICE_S3_ENDPOINT": "https://s3.example"})[
        "spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    with pytest.raises(ObjectStoreConfigError):
        object_store_conf("s3a://b/p", {"SLUICE_S3_PATH_STYLE": "yes"})
    with pytest.raises(ObjectStoreConfigError):
        object_store_conf("s3a://b/p", {"AWS_ACCESS_KEY_ID": "AK"})


def test_the_runtime_applies_them_under_its_flags() -> None:
    env = {"SLUICE_PLAN": "p.json", "SLUICE_BOOTSTRAP": "k:9092", "SLUICE_CHECKPOINT": "s3a://b/p",
           "SLUICE_S3_ENDPOINT": "http://s3:9000", "SLUICE_SPARK_CONF": "spark.hadoop.fs.s3a.endpoint=http://mine"}
    config = resolve_config(build_parser().parse_args(["run"]), env)
    assert config.conf["spark.sql.streaming.checkpointFileManagerClass"] == OBJECT_STORE_CHECKPOINT_MANAGER
    assert config.conf["spark.hadoop.fs.s3a.endpoint"] == "http://mine"  # explicit settings win
    volume = resolve_config(build_parser().parse_args(["run"]), {**env, "SLUICE_CHECKPOINT": "/data/ck"})
    assert "spark.sql.streaming.checkpointFileManagerClass" not in volume.conf
    with pytest.raises(ConfigError, match="SLUICE_S3_PATH_STYLE"):
        resolve_config(build_parser().parse_args(["run"]), {**env, "SLUICE_S3_PATH_STYLE": "maybe"})


def test_a_large_copy_is_split_into_contiguous_ranges_within_s3s_limits() -> None:
    mib, gib = 1024**2, 1024**3
    assert cs.copy_ranges(13 * mib, 5 * mib) == [
        (0, 5 * mib - 1), (5 * mib, 10 * mib - 1), (10 * mib, 13 * mib - 1)]
    assert cs.copy_ranges(1, 5 * mib) == [(0, 0)]
    ranges = cs.copy_ranges(6 * 1024 * gib, cs.MULTIPART_PART_SIZE)  # 6 TiB: parts grow past 512 MiB
    assert len(ranges) <= cs.MAX_PARTS
    assert ranges[0][0] == 0 and ranges[-1][1] == 6 * 1024 * gib - 1
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))
    assert all(last - first + 1 <= 5 * gib for first, last in ranges)
    with pytest.raises(ValueError):
        cs.copy_ranges(0, 5 * mib)
