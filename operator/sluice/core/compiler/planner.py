"""Planning a parsed query into plan steps: sources, joins, unions, filters, projections."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.tokens import TokenType

from sluice.core.compiler.base import PlanState, Stateful, field_specs
from sluice.core.compiler.exprs import Compiled, ExprCompiler, column_node, column_text, is_time_window
from sluice.core.compiler.joins import plan_join
from sluice.core.compiler.keys import plan_key_format
from sluice.core.compiler.scope import Field, Relation, did_you_mean
from sluice.core.compiler.select import plan_select
from sluice.core.compiler.sqltext import SqlText
from sluice.core.compiler.stars import star_fields
from sluice.core.compiler.typerules import func_name
from sluice.core.plan.model import (
    DeduplicateV1,
    FilterV1,
    KafkaSourceV1,
    MalformedHandling,
    NamedExpr,
    ProjectV1,
    RegistrySchema,
    UnionV1,
    WatermarkV1,
)
from sluice.core.spec import DEFAULT_MAX_OFFSETS_PER_TRIGGER, QuerySpec, Source
from sluice.core.types import SparkType, parse_type


class Planner:
    """Plans a parsed query into steps; implements ``base.Planning`` for the SELECT and join planners."""

    def __init__(self, spec: QuerySpec, text: SqlText, watermark_delays: dict[str, str],
                 value_schemas: Mapping[str, RegistrySchema] | None = None,
                 key_schemas: Mapping[str, RegistrySchema] | None = None) -> None:
        self.spec = spec
        #: the pinned registry schema of each avro source (by name in lower case)
        self.value_schemas = dict(value_schemas or {})
        #: the pinned registry schema of each avro key (by source name in lower case)
        self.key_schemas = dict(key_schemas or {})
        self.text = text
        self.delays = watermark_delays
        self.state = PlanState()
        self.by_name: dict[str, Source] = {s.name.lower(): s for s in spec.sources}

    # -- queries ---------------------------------------------------------------------------------
    def plan_query(self, node: exp.Expr) -> Relation:
        if isinstance(node, exp.Subquery):
            return self.plan_query(node.this)
        self.refuse_modifiers(node)
        if isinstance(node, exp.Except | exp.Intersect):
            word = "EXCEPT" if isinstance(node, exp.Except) else "INTERSECT"
            raise self.text.fail(
                f"{word} is not supported on streams; only UNION ALL combines queries",
                offset=self.text.word_offset(word.lower()),
            )
        if isinstance(node, exp.Union):
            return self.plan_union(node)
        if isinstance(node, exp.Select):
            return plan_select(self, node)
        raise self.text.fail("only SELECT queries (and UNION ALL of them) are supported here", node)

    def refuse_modifiers(self, node: exp.Expr) -> None:
        start = (self.text.node_offset(node) or 0) - 1
        if node.args.get("with_") or node.args.get("with"):
            raise self.text.fail(
                "WITH (common table expressions) is not supported yet; use a subquery in FROM",
                offset=self.text.token_offset(TokenType.WITH),
            )
        if node.args.get("order"):
            raise self.text.fail(
                "ORDER BY is not supported: Spark Structured Streaming cannot sort an unbounded stream "
                "(sorting is only allowed after an aggregation in complete mode); remove the ORDER BY",
                offset=self.text.token_offset(TokenType.ORDER_BY, after=start),
            )
        if node.args.get("limit") or node.args.get("offset"):
            raise self.text.fail(
                "LIMIT/OFFSET is not supported on streams: a streaming query has no end to count from; "
                "remove it",
                offset=self.text.token_offset(TokenType.LIMIT, TokenType.OFFSET, after=start),
            )
        for key, word in (("windows", "WINDOW"), ("qualify", "QUALIFY"), ("laterals", "LATERAL VIEW")):
            if node.args.get(key):
                raise self.text.fail(
                    f"{word} is not supported in streaming queries",
                    offset=self.text.word_offset(word.split()[0].lower(), after=start),
                )

    def plan_union(self, node: exp.Union) -> Relation:
        branches: list[exp.Expr] = []

        def flatten(n: exp.Expr) -> None:
            if isinstance(n, exp.Union) and not n.args.get("order") and not n.args.get("limit"):
                if n.args.get("distinct"):
                    raise self.text.fail(
                        "UNION without ALL removes duplicates, which needs unbounded state; "
                        "write UNION ALL (and SELECT DISTINCT over it if you need it)",
                        offset=self.text.word_offset("union", after=(self.text.node_offset(n.this) or 0)),
                    )
                flatten(n.this)
                flatten(n.expression)
            else:
                branches.append(n)

        flatten(node)
        rels = [self.plan_query(b) for b in branches]
        first = rels[0]
        for branch, rel in zip(branches[1:], rels[1:], strict=True):
            if rel.aggregated or first.aggregated:
                raise self.text.fail(
                    "UNION ALL of aggregations is not supported; aggregate over the union", branch
                )
            if len(rel.fields) != len(first.fields):
                raise self.text.fail(
                    f"UNION ALL branches must have the same number of columns: the first has "
                    f"{len(first.fields)}, this one has {len(rel.fields)}",
                    branch,
                )
            for i, (a, b) in enumerate(zip(first.fields, rel.fields, strict=True)):
                if a.type != b.type:
                    raise self.text.fail(
                        f"UNION ALL column {i + 1} ('{a.name}') is {a.type.render()} in the first branch "
                        f"but {b.type.render()} ('{b.name}') here; CAST it so the types match",
                        branch,
                    )
        out_fields = [Field(f.name, f.type) for f in first.fields]
        watermarks: set[tuple[str | None, str]] = {
            (None, f.name.lower())
            for i, f in enumerate(first.fields)
            if all(r.is_watermarked(r.fields[i]) for r in rels)
        }
        step_id = self.state.next_id("union")
        self.state.steps.append(
            UnionV1(id=step_id, inputs=[r.step_id for r in rels], schema_=field_specs(out_fields))
        )
        return Relation(step_id, out_fields, watermarks=watermarks, describe="the UNION ALL")

    # -- FROM items ------------------------------------------------------------------------------
    def plan_from_item(self, item: exp.Expr) -> Relation:
        if isinstance(item, exp.Table):
            return self.plan_table(item)
        if isinstance(item, exp.Subquery):
            rel = self.plan_query(item.this)
            alias = item.alias or None
            return Relation(
                rel.step_id,
                [Field(f.name, f.type) for f in rel.fields],
                alias=alias,
                watermarks={
                    (None, n) for _, n in rel.watermarks if n in {f.name.lower() for f in rel.fields}
                },
                aggregated=rel.aggregated,
                joined=rel.joined,
                deduplicated=rel.deduplicated,
                describe=f"subquery '{alias}'" if alias else "the subquery",
            )
        raise self.text.fail("only sources and subqueries can appear in FROM", item)

    def plan_table(self, table: exp.Table) -> Relation:
        if table.args.get("db") or table.args.get("catalog"):
            raise self.text.fail(
                f"'{table.sql(dialect='spark')}' is not a source: refer to sources by their name "
                "in spec.sources",
                table,
            )
        for key, word in (("sample", "TABLESAMPLE"), ("pivots", "PIVOT"), ("version", "VERSION AS OF")):
            if table.args.get(key):
                offset = self.text.word_offset(
                    word.split()[0].lower(), after=self.text.node_offset(table) or 0
                )
                raise self.text.fail(
                    f"{word} is not supported on a streaming source",
                    table if offset is None else None,
                    offset,
                )
        if isinstance(table.this, exp.Func):
            fname = func_name(table.this)
            raise self.text.fail(
                f"table-valued functions such as {fname}(...) are not supported as sources; read from "
                "a source declared in spec.sources",
                table,
            )
        name = table.name
        source = self.by_name.get(name.lower())
        if source is None:
            names = [s.name for s in self.spec.sources]
            raise self.text.fail(
                f"source '{name}' is not declared in spec.sources" + did_you_mean(name, names), table
            )
        rel = self.source_relation(source)
        alias = table.alias or source.name
        return Relation(
            rel.step_id,
            list(rel.fields),
            alias=alias,
            watermarks=set(rel.watermarks),
            describe=f"source '{source.name}'",
        )

    def source_relation(self, source: Source) -> Relation:
        key = source.name.lower()
        if key in self.state.sources:
            return self.state.sources[key]
        values = [Field(c.name, parse_type(c.type)) for c in source.columns]
        key_fields = [Field(c.name, parse_type(c.type)) for c in source.key_columns]
        # the key's columns first, as ksqlDB's key columns, by their names in SQL (keyPrefix)
        fields = [Field(source.key_sql_name(f.name), f.type) for f in key_fields] + values
        malformed = source.malformed
        topic = malformed.topic
        if malformed.policy == "deadLetter" and not topic:
            topic = f"{self.spec.sink.topic}.dlq"
        step_id = f"source-{source.name}"
        self.state.steps.append(
            KafkaSourceV1(
                id=step_id,
                schema_=field_specs(fields),
                source=source.name,
                topic=source.topic,
                format=source.format,
                value_schema=self.value_schemas.get(key),
                columns=field_specs(values),
                key_format=plan_key_format(source),
                key_columns=field_specs(key_fields) if source.reads_key else None,
                key_schema=self.key_schemas.get(key),
                key_prefix=source.key_prefix,
                starting_offsets=source.starting_offsets,
                max_offsets_per_trigger=source.max_offsets_per_trigger or DEFAULT_MAX_OFFSETS_PER_TRIGGER,
                min_partitions=source.min_partitions,
                malformed=MalformedHandling(policy=malformed.policy, topic=topic),
                on_data_loss=source.on_data_loss,
                isolation_level="read_committed",
            )
        )
        watermarks: set[tuple[str | None, str]] = set()
        if source.event_time is not None:
            col = next(f for f in fields if f.name.lower() == source.event_time.column.lower())
            wm_id = f"watermark-{source.name}"
            self.state.steps.append(
                WatermarkV1(
                    id=wm_id,
                    inputs=[step_id],
                    schema_=field_specs(fields),
                    column=col.name,
                    delay=self.delays[source.name],
                )
            )
            step_id = wm_id
            watermarks.add((None, col.name.lower()))
        rel = Relation(step_id, fields, alias=source.name, watermarks=watermarks)
        self.state.sources[key] = rel
        return rel

    # -- joins -----------------------------------------------------------------------------------
    def plan_join(self, left: Relation, join: exp.Join) -> Relation:
        return plan_join(self, left, join)

    # -- simple steps ----------------------------------------------------------------------------
    def add_filter(
        self, rel: Relation, node: exp.Expr, context: str, compiler: ExprCompiler | None = None
    ) -> Relation:
        compiler = compiler or ExprCompiler(self.text, rel, context)
        compiled = compiler.compile(node)
        if compiled.type.name not in ("boolean", "void"):
            raise self.text.fail(
                f"{context} must be a condition (boolean), but '{compiled.sql}' is a "
                f"{compiled.type.render()}",
                node,
            )
        step_id = self.state.next_id("filter")
        self.state.steps.append(
            FilterV1(
                id=step_id, inputs=[rel.step_id], schema_=field_specs(rel.fields), condition=compiled.sql
            )
        )
        return Relation(
            step_id,
            rel.fields,
            alias=rel.alias,
            watermarks=rel.watermarks,
            aggregated=rel.aggregated,
            joined=rel.joined,
            deduplicated=rel.deduplicated,
            describe=rel.describe,
        )

    def add_project(self, rel: Relation, items: list[tuple[str, Compiled, exp.Expr]]) -> Relation:
        seen: dict[str, exp.Expr] = {}
        for name, _, node in items:
            if name.lower() in seen:
                raise self.text.fail(
                    f"the output has two columns named '{name}'; give one of them another name with AS", node
                )
            seen[name.lower()] = node
        out_fields = [Field(name, c.type) for name, c, _ in items]
        watermarks: set[tuple[str | None, str]] = set()
        by_text = {column_text(f.name, f.qualifier): f for f in rel.fields}
        for name, c, _ in items:
            if isinstance(c.node, exp.Column):
                src = by_text.get(c.sql)
                if src is not None and rel.is_watermarked(src):
                    watermarks.add((None, name.lower()))
        identity = len(items) == len(rel.fields) and all(
            f.qualifier is None and c.sql == column_text(f.name) and name == f.name
            for (name, c, _), f in zip(items, rel.fields, strict=True)
        )
        if identity:
            return Relation(
                rel.step_id,
                out_fields,
                alias=rel.alias,
                watermarks=watermarks,
                aggregated=rel.aggregated,
                joined=rel.joined,
                deduplicated=rel.deduplicated,
                describe=rel.describe,
            )
        step_id = self.state.next_id("project")
        self.state.steps.append(
            ProjectV1(
                id=step_id,
                inputs=[rel.step_id],
                schema_=field_specs(out_fields),
                expressions=[NamedExpr(name=name, expr=c.sql) for name, c, _ in items],
            )
        )
        return Relation(
            step_id,
            out_fields,
            alias=rel.alias,
            watermarks=watermarks,
            aggregated=rel.aggregated,
            joined=rel.joined,
            deduplicated=rel.deduplicated,
            describe=rel.describe,
        )

    def add_dedup(self, rel: Relation, node: exp.Expr) -> Relation:
        if rel.aggregated:
            raise self.text.fail(
                "SELECT DISTINCT over an aggregation would chain two stateful operators; "
                "the GROUP BY already yields one row per group",
                offset=self.text.token_offset(TokenType.DISTINCT),
            )
        step_id = self.state.next_id("deduplicate")
        self.state.steps.append(
            DeduplicateV1(
                id=step_id,
                inputs=[rel.step_id],
                schema_=field_specs(rel.fields),
                columns=[f.name for f in rel.fields],
            )
        )
        self.state.stateful.append(Stateful("dedup", node, self.text.token_offset(TokenType.DISTINCT)))
        return Relation(
            step_id,
            rel.fields,
            alias=rel.alias,
            watermarks=rel.watermarks,
            aggregated=rel.aggregated,
            joined=rel.joined,
            deduplicated=True,
            describe=rel.describe,
        )

    def select_items(self, sel: exp.Select, rel: Relation) -> list[tuple[str | None, exp.Expr]]:
        """Expand stars; return (explicit name or None, expression) per output column."""
        out: list[tuple[str | None, exp.Expr]] = []
        for item in sel.expressions:
            if isinstance(item, exp.Star):
                fields = star_fields(self.text, item, rel, rel.fields)
                out.extend((None, column_node(f.name, f.qualifier)) for f in fields)
            elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                qual = item.table
                if not rel.has_qualifier(qual):
                    raise self.text.fail(
                        f"'{qual}' is not a source alias in this query"
                        + did_you_mean(qual, rel.qualifiers or [rel.alias or ""]),
                        item,
                    )
                fields = star_fields(self.text, item.this, rel, rel.fields_of(qual))
                out.extend((None, column_node(f.name, f.qualifier)) for f in fields)
            elif isinstance(item, exp.Alias):
                out.append((item.alias, item.this))
            else:
                out.append((None, item))
        if not out:
            raise self.text.fail(
                "* EXCEPT (...) removes every column, so the query selects nothing; keep at least one",
                sel.expressions[0] if sel.expressions else None,
                self.text.word_offset("except"),
            )
        return out

    def output_name(self, explicit: str | None, node: exp.Expr, compiled: Compiled) -> str:
        if explicit:
            return explicit
        if isinstance(compiled.node, exp.Column | exp.Dot):
            return compiled.node.name
        if is_time_window(node):
            return str(node.this).lower()
        raise self.text.fail(
            f"give the expression '{compiled.sql}' a name with AS: its column in the output needs one", node
        )


def type_of(rel: Relation, name: str) -> SparkType | None:
    found = rel.lookup(name)
    return found[0].type if found else None
