"""Benchmark: compile a ~50-line query N times; compare with parsing the same SQL with sqlglot alone
(the baseline is sqlglot's Spark tokenizer + parser, with the compiler's window(...) token fix, which
Spark's window() function needs).

    .venv/bin/python bench/bench_compile.py [-n 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from sluice.core.compiler import compile_query
from sluice.core.compiler.sqlparse import parse_sql
from sluice.core.spec import QuerySpec

SQL = """
-- revenue and fulfilment per customer and 5-minute window
SELECT
  w,
  customer_id,
  region,
  revenue,
  orders,
  revenue / orders AS avg_order,
  big_orders,
  CASE
    WHEN revenue >= 10000 THEN 'platinum'
    WHEN revenue >= 1000 THEN 'gold'
    WHEN revenue >= 100 THEN 'silver'
    ELSE 'bronze'
  END AS tier,
  max_quantity,
  distinct_products
FROM (
  SELECT
    window(ts, '5 minutes') AS w,
    customer_id,
    upper(trim(address.country)) AS region,
    sum(net) AS revenue,
    count(*) AS orders,
    sum(CASE WHEN net > 500 THEN 1 ELSE 0 END) AS big_orders,
    max(quantity) AS max_quantity,
    approx_count_distinct(product_id) AS distinct_products
  FROM (
    SELECT
      order_id,
      customer_id,
      product_id,
      address,
      quantity,
      ts,
      CAST(amount AS DECIMAL(12, 2)) - coalesce(discount, 0) AS net,
      lower(status) AS status_lc,
      date_format(ts, 'yyyy-MM-dd') AS day
    FROM orders
    WHERE amount > 0
      AND status IN ('paid', 'shipped', 'delivered')
      AND customer_id IS NOT NULL
      AND length(order_id) = 12
  ) cleaned
  WHERE status_lc <> 'test'
  GROUP BY window(ts, '5 minutes'), customer_id, upper(trim(address.country))
  HAVING count(*) > 1
) agg
"""

SPEC = {
    "sources": [
        {
            "name": "orders",
            "topic": "orders",
            "schema": [
                {"name": "order_id", "type": "string"},
                {"name": "customer_id", "type": "string"},
                {"name": "product_id", "type": "string"},
                {"name": "status", "type": "string"},
                {"name": "amount", "type": "double"},
                {"name": "discount", "type": "decimal(10,2)"},
                {"name": "quantity", "type": "int"},
                {"name": "ts", "type": "timestamp"},
                {"name": "address", "type": "struct<street:string,city:string,country:string>"},
            ],
            "eventTime": {"column": "ts", "watermark": "2 minutes"},
        }
    ],
    "sql": SQL,
    "sink": {"topic": "customer-revenue", "outputMode": "update", "key": ["w", "customer_id"]},
}


def measure(fn: object, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return times


def describe(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="iterations (default 200)")
    args = parser.parse_args()
    spec = QuerySpec.model_validate(SPEC)
    lines = len(SQL.strip().splitlines())
    plan = compile_query(spec)  # warm up (imports, caches)
    parse_sql(SQL)
    compile_times = measure(lambda: compile_query(spec), args.n)
    parse_times = measure(lambda: parse_sql(SQL), args.n)
    cm, cp = describe(compile_times)
    pm, pp = describe(parse_times)
    print(f"query: {lines} lines, plan with {len(plan.steps)} steps, n={args.n}")
    print(f"compile_query:          median {cm:7.2f} ms   p95 {cp:7.2f} ms")
    print(f"baseline sqlglot parse: median {pm:7.2f} ms   p95 {pp:7.2f} ms")
    print(f"ratio compile/parse (median): {cm / pm:.1f}x")


if __name__ == "__main__":
    main()
