"""Thin kopf handlers: one module per resource/action, delegating to sluice.operator.reconcile,
.deletion and .cluster."""
