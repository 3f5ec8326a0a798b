"""Custom resource models (pydantic) and the CRD generator."""

from sluice.crd.base import API_VERSION, GROUP, VERSION
from sluice.crd.querycluster import QueryCluster, QueryClusterSpec, QueryClusterStatus
from sluice.crd.streamingquery import StreamingQuery, StreamingQuerySpec, StreamingQueryStatus

KINDS = (StreamingQuery, QueryCluster)

__all__ = [
    "API_VERSION", "GROUP", "KINDS", "VERSION",
    "QueryCluster", "QueryClusterSpec", "QueryClusterStatus",
    "StreamingQuery", "StreamingQuerySpec", "StreamingQueryStatus",
]
