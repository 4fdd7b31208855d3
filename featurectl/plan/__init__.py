"""``featurectl plan``: a PySpark upgrade/downgrade planner over a metrics dataset.

* ``layout``: the dataset on disk (written by ``featurectl collect`` and ``synth``).
* ``transforms``: pure DataFrame functions (parse, counter increases, verdicts).
* ``readers``: reading the dataset and the live state into DataFrames.
* ``report``: plan.json, report.md and the PNG charts.
* ``job``: the entry point (``featurectl plan`` and ``spark-submit``).
* ``synth``: a synthetic dataset generator for tests and the benchmark.

Only ``layout`` is imported by ``featurectl collect``, so collecting needs no Spark.
"""
