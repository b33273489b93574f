"""Ballast's lag data pipeline on Spark: the streaming lag job and the fleet backtest.

Needs the ``pipeline`` extra (PySpark, pyarrow, pandas, kafka-python) and Java 17.
``lagmath`` and ``traces`` are pure Python and import without Spark.
"""
