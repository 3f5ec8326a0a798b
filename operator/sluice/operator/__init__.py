"""The control plane: kopf handlers, pure object builders, Kafka admin, metrics."""
