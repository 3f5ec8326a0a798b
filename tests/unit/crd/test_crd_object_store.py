"""QueryCluster ``spec.storage.objectStore``: its validation (the field named), and its place in the
engine pinned per query."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sluice.core.manifest import validation_problems
from sluice.crd.querycluster import QueryClusterSpec

from tests.support.operator_fixtures import cluster_spec

STORE = {
    "uri": "s3a://checkpoints/sluice",
    "endpoint": "http://s3proxy.storage:8080",
    "region": "eu-west-1",
    "pathStyleAccess": True,
    "credentialsSecret": "s3-credentials",
}


def with_store(**store: Any) -> dict[str, Any]:
    return cluster_spec(storage={"objectStore": {**STORE, **store}})


def problem(spec: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        QueryClusterSpec.model_validate(spec)
    first = validation_problems(info.value, "spec")[0]
    return first.field, first.message


def test_an_object_store_is_parsed_with_its_defaults() -> None:
    store = QueryClusterSpec.model_validate(
        cluster_spec(storage={"objectStore": {"uri": "s3a://b-1/"}})
    ).storage
    assert store.object_store is not None and store.mode == "objectStore" and store.spreads
    assert store.object_store.bucket == "b-1" and store.object_store.root == "s3a://b-1"
    assert (
        store.object_store.endpoint,
        store.object_store.region,
        store.object_store.credentials_secret,
    ) == (None, None, None)
    assert (
        store.object_store.path_style_access is False and store.object_store.service_account_annotations == {}
    )
    full = QueryClusterSpec.model_validate(with_store()).storage.object_store
    assert full is not None and full.root == "s3a://checkpoints/sluice" and full.path_style_access is True


@pytest.mark.parametrize(
    "uri", ["s3a://bucket", "s3a://bucket/", "s3a://my.bucket-1/a/b=c/d_e", "s3a://abc/x/"]
)
def test_good_uris(uri: str) -> None:
    assert QueryClusterSpec.model_validate(with_store(uri=uri)).storage.object_store is not None


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("s3://bucket/prefix", "scheme s3a, not 's3'"),
        ("gs://bucket", "scheme s3a, not 'gs'"),
        ("bucket/prefix", "scheme s3a, not 'missing'"),
        ("s3a://", "'' is not a bucket name"),
        ("s3a://Bucket/x", "'Bucket' is not a bucket name"),
        ("s3a://ab/x", "'ab' is not a bucket name"),
        ("s3a://bucket//x", "prefix segment '' is not allowed"),
        ("s3a://bucket/a/../b", "prefix segment '..' is not allowed"),
        ("s3a://bucket/a b", "prefix segment 'a b' is not allowed"),
    ],
)
def test_bad_uris_are_refused_naming_the_field(uri: str, words: str) -> None:
    field, message = problem(with_store(uri=uri))
    assert field == "spec.storage.objectStore.uri"
    assert words in message and "s3a://<bucket>[/<prefix>]" in message


@pytest.mark.parametrize(
    ("store", "field"),
    [
        ({"endpoint": "s3proxy:8080"}, "spec.storage.objectStore.endpoint"),
        ({"endpoint": "ftp://s3proxy"}, "spec.storage.objectStore.endpoint"),
        ({"region": "EU West"}, "spec.storage.objectStore.region"),
        ({"credentialsSecret": "Not_A_Name"}, "spec.storage.objectStore.credentialsSecret"),
        ({"pathStyle": True}, "spec.storage.objectStore.pathStyle"),
        ({"uri": None}, "spec.storage.objectStore.uri"),
    ],
)
def test_other_fields_are_checked_naming_the_field(store: dict[str, Any], field: str) -> None:
    assert problem(with_store(**store))[0] == field


def test_service_account_annotations_are_checked() -> None:
    ok = with_store(
        serviceAccountAnnotations={
            "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/q",
            "iam.gke.io/gcp-service-account": "q@p.iam.gserviceaccount.com",
        }
    )
    assert QueryClusterSpec.model_validate(ok).storage.object_store is not None
    field, message = problem(with_store(serviceAccountAnnotations={"sluice.dev/query-name": "x"}))
    assert field == "spec.storage.objectStore.serviceAccountAnnotations"
    assert "annotations under sluice.dev/ are owned by the operator" in message
    assert "not a valid annotation key" in problem(with_store(serviceAccountAnnotations={"a b": "x"}))[1]


def test_the_object_store_is_part_of_the_engine() -> None:
    volume = QueryClusterSpec.model_validate(cluster_spec()).engine("img")
    store = QueryClusterSpec.model_validate(with_store()).engine("img")
    assert volume.object_store is None and "objectStore" not in volume.canonical()
    assert store.object_store is not None and store.canonical()["objectStore"]["uri"] == STORE["uri"]
    assert volume.compute_digest() != store.compute_digest()
    # the workload the core compares carries where the checkpoints live
    assert store.facts().workload["objectStore.uri"] == STORE["uri"]
    assert "objectStore.uri" not in volume.facts().workload


def test_a_cluster_as_the_pinned_engine_sees_it_keeps_the_pinned_storage() -> None:
    """A running query's storage comes from its pinned engine, not from the cluster's current spec."""
    now_store = QueryClusterSpec.model_validate(with_store())
    pinned_volume = QueryClusterSpec.model_validate(cluster_spec()).engine("img")
    assert now_store.with_engine(pinned_volume).storage.object_store is None
    now_volume = QueryClusterSpec.model_validate(cluster_spec())
    pinned_store = now_store.engine("img")
    seen = now_volume.with_engine(pinned_store).storage
    assert seen.object_store == pinned_store.object_store and seen.mode == "objectStore"


def test_access_modes_say_whether_drivers_spread() -> None:
    def storage(mode: str) -> Any:
        return QueryClusterSpec.model_validate(cluster_spec(storage={"accessMode": mode})).storage

    assert [storage(m).spreads for m in ("ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany")] == [
        False,
        False,
        True,
    ]
    assert storage("ReadWriteMany").mode == "ReadWriteMany"


def test_the_example_is_valid_and_builds_a_workload_without_a_claim() -> None:
    from pathlib import Path

    import yaml
    from sluice.crd.streamingquery import StreamingQuerySpec
    from sluice.operator import builders

    example = Path(__file__).parents[3] / "examples" / "object-store.yaml"
    docs = list(yaml.safe_load_all(example.read_text()))
    cluster = QueryClusterSpec.model_validate(next(d for d in docs if d["kind"] == "QueryCluster")["spec"])
    query = StreamingQuerySpec.model_validate(next(d for d in docs if d["kind"] == "StreamingQuery")["spec"])
    ctx = builders.QueryContext(namespace="shop", name="revenue", uid="u", spec=query, cluster=cluster)
    kinds = [o["kind"] for o in builders.workload_objects(ctx, "ab" * 32, "cm")]
    assert "PersistentVolumeClaim" not in kinds
    assert builders.executor_storage_problem(ctx, "default") is None and builders.node_loss(ctx)[0]
