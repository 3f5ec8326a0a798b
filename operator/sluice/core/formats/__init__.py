"""Record formats beside JSON (issue 30): how a schema of another format maps to the Spark SQL types a
plan carries (:mod:`sluice.core.formats.avro`). Pure: schemas come in parsed, nothing is fetched."""
