"""JVM options of the test suite's Spark drivers (never of the product's defaults).

A test's driver JVM lives seconds to minutes over a few hundred records, where C2's background
compilation is about 40 % of its CPU: compiling with C1 only (``-XX:TieredStopAtLevel=1``) took a
streaming driver's JVM from 72-77 to 43-44 CPU-seconds over its first minute, with shorter batches
(steady p50 0.27 s against 0.36 s; 2026-11-26, ``local[2]``, a rate source at 50 records/s into an
aggregation, 3 runs each, interleaved). On the 2-core CI machine the suite's JVMs compete for the
same CPUs, so that is time every test gets back (the suite: 36 min instead of 58). Production
drivers keep the JVM's defaults: with C1 only, 1M records took about twice as long
(``bench/bench_runtime.py``; docs/runtime.md, "The driver's JVM"); a user can choose C1 the same
way, through ``sparkConf``.

Beside these options every test driver maps the class-data-sharing archive of the machine's JDK and
PySpark (``tests/conftest.py``, ``use_class_data_archive``), as the runtime image's drivers map the
image's (``sluice_runtime.classdata``).
"""

from __future__ import annotations

#: added to every test driver JVM: through ``SPARK_SUBMIT_OPTS`` (Spark's launcher adds it to the
#: driver JVM's options, on top of ``spark.driver.extraJavaOptions``) for the JVMs the test
#: processes start, and through the e2e QueryCluster's ``sparkConf`` for the driver pods
TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1"
