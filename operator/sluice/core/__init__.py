"""The pure core: SQL -> plan compiler, plan model, upgrade classifier, status reducers.

Nothing in this package performs I/O or imports kopf, kubernetes, confluent_kafka or pyspark
(enforced by import-linter, see pyproject.toml).
"""
