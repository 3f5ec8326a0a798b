"""Development and test tooling: the local platform (Kafka, Kubernetes control plane, Spark jars)."""
