"""The ``streamrep`` PySpark Python Data Source: a stream as a DataFrame, batch or streaming, and a
stream as a sink. Users' guide: docs/spark-source.md.

    register(spark)  # or spark.dataSource.register(StreamrepDataSource)
    spark.read.format("streamrep").option("path", "/mapr/<cluster>/<stream>").load()
    spark.readStream.format("streamrep").option("path", "/mapr/<cluster>/<stream>").load()
    df.write.format("streamrep").option("copyto", "/mapr/<cluster>/<stream>").save()

Reader options: ``path`` (required), ``home``, ``topics`` (comma list), ``startingOffsets``
(earliest|latest), ``maxRecordsPerTrigger`` (streaming). Rows: ``rows.SCHEMA``, one message each.
Writer options: ``copyto`` (else ``path``), ``home``, ``report``; ``mode`` copy, the only one.

The parts: ``rows`` (the schema and Arrow batches), ``offsets``, ``reader``, ``writer``, and
``runtime`` (what each process opens once). The Spark jobs' own tasks are in ``tasks``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from streamrep.errors import InvalidArgument
from streamrep.spark.offsets import default_limit
from streamrep.spark.reader import StreamBatchReader, StreamOptions, StreamStreamReader
from streamrep.spark.rows import SCHEMA
from streamrep.spark.writer import CopyStreamWriter, CopyWriter

FORMAT = "streamrep"


class StreamrepDataSource(DataSource):
    """``format("streamrep")``: read a stream (option ``path``), or write into one (``copyto``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def _opt(self, name: str) -> str | None:
        value = self.options.get(name)
        return value if value not in (None, "") else None

    def reader(self, schema: StructType) -> DataSourceReader:
        return StreamBatchReader(StreamOptions(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamStreamReader(StreamOptions(self.options), default_limit(self.options))

    def _destination(self) -> str:
        destination = self._opt("copyto") or self._opt("path")
        if not destination:
            raise InvalidArgument("mode copy needs option copyto (the destination stream)")
        return destination

    def _check_mode(self) -> None:
        mode = (self._opt("mode") or "copy").lower()
        if mode != "copy":
            raise InvalidArgument(f"the streamrep sink supports mode copy, not {mode!r}")

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        self._check_mode()
        return CopyWriter(self._opt("home"), self._destination(), self._opt("report"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        self._check_mode()
        return CopyStreamWriter(self._opt("home"), self._destination(), self._opt("report"))


def register(spark: Any) -> None:
    """Register ``format("streamrep")`` with a SparkSession, and make sure its Python workers can
    import streamrep: PySpark starts them with ``PYSPARK_PYTHON``, else with whatever ``python3``
    is on the PATH, which is rarely the environment streamrep is installed in. With neither
    ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` set, the workers run this interpreter; on a local
    master a chosen one that cannot import streamrep is refused here, in one line, instead of
    failing in every task behind a JVM stack trace."""
    context = spark.sparkContext
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if not chosen:
        context.pythonExec = sys.executable  # read when the data source is wrapped below
    elif context.master.startswith("local") and context.pythonExec != sys.executable:
        # (paths compared as given: a venv's python is a link to a base interpreter without streamrep)
        _check_worker_python(context.pythonExec)
    spark.dataSource.register(StreamrepDataSource)


def _check_worker_python(python: str) -> None:
    """InvalidArgument unless ``python`` (the workers' interpreter) imports streamrep and pyarrow."""
    try:
        found = (
            subprocess.run(
                [python, "-c", "import streamrep.errors, pyarrow"], capture_output=True, timeout=120
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if not found:
        raise InvalidArgument(
            f"Spark's Python workers run {python} (PYSPARK_PYTHON or spark.pyspark.python), which cannot import "
            f"streamrep and pyarrow: set it to a Python that has them, such as {sys.executable}"
        )
