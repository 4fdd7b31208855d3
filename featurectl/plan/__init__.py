"""``featurectl plan``: a PySpark upgrade/downgrade planner over a metrics dataset.

* ``layout``, ``columnar``: the dataset on disk (written by ``featurectl collect`` and
  ``synth``); ``convert`` turns a text dataset into the Parquet one.
* ``readers``: reading the dataset into DataFrames; ``live_state``: the live gateways
  and finalized levels (ZooKeeper, a snapshot, or the gauges).
* ``transforms``: pure DataFrame functions (parse, counter increases, usage);
  ``tally``, ``decide``: what the collected rows add up to, on the driver.
* ``compute``: the Spark side of a plan, read to ``PlanData`` (``model``).
* ``report``: plan.json and the files made from it: ``steps``, ``sections``
  (shared by ``report_md`` and ``report_html``), ``charts``.
* ``job``: the entry point (``featurectl plan`` and ``spark-submit``), with
  ``arguments`` (its parser) and ``session`` (the SparkSession and its settings).
* ``synth``: a synthetic dataset generator for tests and the benchmark.

Only ``layout`` and ``columnar`` are imported by ``featurectl collect``, so collecting
needs no Spark.
"""
