"""The data sources Spark looks up by name: ``icefloe`` (tables: read, stream, write) and
``icefloe-commits`` (a stream of commit events)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructField, StructType

from pyspark_icefloe.batch import BatchReader, PushdownBatchReader, Source, pushdown_planning
from pyspark_icefloe.commits import EVENT_SCHEMA, CommitsStreamReader
from pyspark_icefloe.connection import IcefloeSparkError, Settings, bool_option, option
from pyspark_icefloe.stream import CHANGE_COLUMNS, TableStreamReader
from pyspark_icefloe.types import spark_schema


class IcefloeDataSource(DataSource):
    """``format("icefloe")``: options ``uri``, ``table`` (``ns.t``) or ``query``, and the rest.

    ``schema()`` runs once per ``load()`` on the driver and pins the table's current snapshot
    on this instance, which Spark pickles and reuses for every action on the DataFrame.
    """

    @classmethod
    def name(cls) -> str:
        return "icefloe"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = Settings.from_options(options)
        self.source: Source | None = None

    def _source(self) -> Source:
        if self.source is None:
            source = Source.from_options(self.options)
            client = self.settings.connect()
            try:
                self.source = source.pinned(client)
            finally:
                client.close()
        return self.source

    def schema(self) -> StructType:
        source = self._source()
        client = self.settings.connect()
        try:
            schema = spark_schema(source.arrow_schema(client))
        finally:
            client.close()
        if bool_option(self.options, "includeChangeColumns", False) or (
                (option(self.options, "onNonAppend") or "").lower() == "changes"):
            for name, kind in CHANGE_COLUMNS:
                schema = schema.add(StructField(name, kind, True))
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        if any(f.name == "_seq" for f in schema.fields) and bool_option(self.options, "includeChangeColumns", False):
            raise IcefloeSparkError("includeChangeColumns and onNonAppend are streaming options")
        kind = PushdownBatchReader if pushdown_planning() else BatchReader
        return kind(self.settings, self._source(), schema, self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        table = option(self.options, "table")
        if not table:
            raise IcefloeSparkError('a streaming read needs option table ("ns.t")')
        return TableStreamReader(self.settings, table, schema, self.options)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from pyspark_icefloe.writer import BatchWriter

        return BatchWriter(self.settings, self._write_table(), schema, overwrite, self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:  # noqa: N802
        from pyspark_icefloe.writer import StreamWriter

        return StreamWriter(self.settings, self._write_table(), schema, overwrite, self.options)

    def _write_table(self) -> str:
        table = option(self.options, "table")
        if not table:
            raise IcefloeSparkError('a write needs option table ("ns.t")')
        return table


class IcefloeCommitsDataSource(DataSource):
    """``format("icefloe-commits")``: one row per commit (options ``uri``, ``tables``, ``startingOffsets``)."""

    @classmethod
    def name(cls) -> str:
        return "icefloe-commits"

    def schema(self) -> str:
        return EVENT_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return CommitsStreamReader(Settings.from_options(self.options), schema, self.options)
