"""The webhook on checkpoint storage: executors on a one-node claim refused (field named), standbys
there warned of, a cluster's move of its checkpoints announced."""

from __future__ import annotations

from typing import Any

from sluice.core.admission import SpecModels, Verdict, review_cluster, review_query
from sluice.core.storage_review import checkpoint_store, node_loss, storage_mode
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec

MODELS = SpecModels(query=StreamingQuerySpec, cluster=QueryClusterSpec)
STORE = {"uri": "s3a://checkpoints/sluice"}
RWO_STANDBYS = (
    "storage.accessMode ReadWriteOnce keeps the driver and its 1 standby on the state claim's node: "
    "a node loss takes all of them; use storage.objectStore or a ReadWriteMany storage class to "
    "spread them"
)


def query(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sources": [
            {
                "name": "orders",
                "topic": "orders",
                "schema": [{"name": "customer", "type": "string"}, {"name": "amount", "type": "double"}],
            }
        ],
        "sql": "SELECT customer, count(*) AS n FROM orders GROUP BY customer",
        "sink": {"topic": "totals", "outputMode": "update"},
        **spec,
    }
    return {
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "StreamingQuery",
        "metadata": {"name": "totals", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": body,
    }


def cluster(**spec: Any) -> dict[str, Any]:
    return {"serviceId": "shop", "kafka": {"bootstrapServers": "kafka:9092"}, **spec}


def create(obj: dict[str, Any], spec: dict[str, Any] | None) -> Verdict:
    return review_query("CREATE", obj, None, {}, models=MODELS, cluster=spec)


def cluster_obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "QueryCluster",
        "metadata": {"name": "default", "namespace": "shop"},
        "spec": cluster(**spec),
    }


def test_standbys_on_a_read_write_once_claim_get_a_warning() -> None:
    assert create(query(standbyReplicas=1), cluster()) == Verdict(True, warnings=[RWO_STANDBYS])
    assert create(query(), cluster(standbyReplicas=1)) == Verdict(True, warnings=[RWO_STANDBYS])
    for quiet in (
        cluster(),
        cluster(standbyReplicas=1, storage={"objectStore": STORE}),
        cluster(standbyReplicas=2, storage={"accessMode": "ReadWriteMany"}),
    ):
        assert create(query(), quiet) == Verdict(True)
    assert create(query(standbyReplicas=0), cluster(standbyReplicas=1)) == Verdict(True)
    missing = review_query("CREATE", query(standbyReplicas=1), None, None, models=MODELS, cluster=None)
    assert len(missing.warnings) == 1 and missing.warnings[0].startswith("QueryCluster 'default' not found")


def test_executors_on_a_one_node_claim_are_refused_naming_the_field() -> None:
    verdict = create(query(), cluster(executors=2))
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == (
        "spec.executors (QueryCluster 'default'): 2 executor pods mount the state claim from any node; "
        "QueryCluster storage.accessMode ReadWriteOnce attaches it to one node: use storage.objectStore or "
        "storage.accessMode ReadWriteMany, or executors 0"
    )
    own = create(query(resources={"executors": 1}), cluster(storage={"accessMode": "ReadWriteOncePod"}))
    assert not own.allowed and own.message.startswith("spec.resources.executors: 1 executor pod mounts")
    assert create(query(resources={"executors": 0}), cluster(executors=2)) == Verdict(True)
    assert create(query(), cluster(executors=2, storage={"objectStore": STORE})) == Verdict(True)
    assert create(query(), cluster(executors=2, storage={"accessMode": "ReadWriteMany"})) == Verdict(True)


def test_a_running_query_is_judged_on_the_storage_it_started_on() -> None:
    running = query(standbyReplicas=1)
    running["status"] = {"engine": {"objectStore": STORE}}
    assert review_query("CREATE", running, None, {}, models=MODELS, cluster=cluster()) == Verdict(True)
    running["status"] = {"engine": {"image": "x"}}  # started on the volume
    assert review_query(
        "CREATE", running, None, {}, models=MODELS, cluster=cluster(storage={"objectStore": STORE})
    ).warnings == [RWO_STANDBYS]


def test_a_cluster_with_executors_on_a_one_node_claim_is_refused() -> None:
    verdict = review_cluster("CREATE", cluster_obj(executors=1), None, models=MODELS)
    assert not verdict.allowed and verdict.message == (
        "spec.executors: 1 executor pod mounts the state claim from any node; QueryCluster "
        "storage.accessMode ReadWriteOnce attaches it to one node: use storage.objectStore or "
        "storage.accessMode ReadWriteMany, or executors 0"
    )
    assert review_cluster(
        "CREATE", cluster_obj(executors=1, storage={"objectStore": STORE}), None, models=MODELS
    ) == Verdict(True)
    assert review_cluster("CREATE", cluster_obj(standbyReplicas=1), None, models=MODELS) == Verdict(
        True, warnings=[RWO_STANDBYS]
    )


def test_a_bad_object_store_is_refused_naming_the_field() -> None:
    verdict = review_cluster(
        "CREATE", cluster_obj(storage={"objectStore": {"uri": "s3://b/x"}}), None, models=MODELS
    )
    assert not verdict.allowed
    assert verdict.message.startswith("spec.storage.objectStore.uri: ")
    assert "scheme s3a, not 's3'" in verdict.message


def test_moving_a_clusters_checkpoints_is_announced() -> None:
    old = cluster_obj()
    new = cluster_obj(storage={"objectStore": STORE})
    verdict = review_cluster("UPDATE", new, old, models=MODELS)
    assert verdict.allowed
    assert verdict.warnings[0] == (
        "spec.storage: checkpoints move from the state volume to s3a://checkpoints/sluice for queries "
        "created from now on; a running query keeps its checkpoint where it is and refuses this cluster's "
        "engine upgrade (UpgradeRejected)"
    )
    assert "storage.objectStore" in verdict.warnings[1]  # an engine field: rolled out in waves
    # another endpoint of the same store is no move
    moved = cluster_obj(storage={"objectStore": {**STORE, "endpoint": "http://s3:9000"}})
    warnings = review_cluster("UPDATE", moved, new, models=MODELS).warnings
    assert len(warnings) == 1 and warnings[0].startswith("this change (storage.objectStore)")


def test_storage_words() -> None:
    assert storage_mode(None) == "ReadWriteOnce" and storage_mode({"objectStore": STORE}) == "objectStore"
    assert storage_mode({"accessMode": "ReadWriteMany"}) == "ReadWriteMany"
    assert checkpoint_store({}) == "the state volume"
    assert checkpoint_store({"storage": {"objectStore": {"uri": "s3a://b-1/p/"}}}) == "s3a://b-1/p"
    assert node_loss("ReadWriteOncePod", 0)[0] is False and node_loss("objectStore", 0)[0] is True
