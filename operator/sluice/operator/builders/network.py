"""The driver's headless Service: metrics scraping, and the address executors connect back to."""

from __future__ import annotations

from typing import Any

from sluice.operator.builders.context import BLOCK_MANAGER_PORT, DRIVER_PORT, HTTP_PORT, QueryContext


def metrics_service(ctx: QueryContext) -> dict[str, Any]:
    meta = ctx.metadata(ctx.names.metrics_service, "driver")
    meta["annotations"].update({
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(HTTP_PORT),
        "prometheus.io/path": "/metrics",
    })
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": ctx.selector(),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "driver-rpc", "port": DRIVER_PORT, "targetPort": DRIVER_PORT, "protocol": "TCP"},
                {"name": "blockmanager", "port": BLOCK_MANAGER_PORT, "targetPort": BLOCK_MANAGER_PORT,
                 "protocol": "TCP"},
            ],
        },
    }

