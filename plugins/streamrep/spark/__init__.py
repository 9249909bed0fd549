"""Layer 5's engine: the ``streamrep`` PySpark Python Data Source, the two Spark jobs, and
spark-submit for them.

Importing this package does not import pyspark; ``streamrep.spark.source`` and
``streamrep.spark.jobs`` do.
"""

from streamrep.spark.submit import application, run_app, spark_submit_command, start_app

__all__ = ["application", "run_app", "spark_submit_command", "start_app"]
