package dev.icefloe.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** One icefloe table (or query) as Spark sees it, pinned to one snapshot for its reads. */
final class FlightTable implements SupportsRead, SupportsWrite {
  /** The pin of a table that had no snapshot: every read of it is empty. */
  static final long EMPTY = Long.MIN_VALUE;

  final FlightOptions options;
  final String[] projections;
  final StructType sparkSchema;
  final Long snapshotId;

  FlightTable(FlightOptions options, String[] projections, StructType sparkSchema, Long snapshotId) {
    this.options = options;
    this.projections = projections;
    this.sparkSchema = sparkSchema;
    this.snapshotId = snapshotId;
  }

  @Override
  public String name() {
    return options.table != null ? options.table : "query";
  }

  @Override
  public StructType schema() {
    return options.include == null ? sparkSchema : ChangeScanBuilder.withChangeColumns(sparkSchema);
  }

  @Override
  public Set<TableCapability> capabilities() {
    if (options.table == null) {
      return EnumSet.of(TableCapability.BATCH_READ);
    }
    if (options.include != null) {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ); // a change stream, not the table
    }
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_WRITE,
        TableCapability.TRUNCATE, TableCapability.STREAMING_WRITE);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    return options.include == null ? new FlightScanBuilder(this) : new ChangeScanBuilder(options, schema());
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new StagedWriteBuilder(options, info);
  }

  /** The FROM item of table reads: the table at its pinned snapshot. */
  String fromItem() {
    String reference = SqlText.table(options.table);
    if (snapshotId != null && snapshotId != EMPTY) {
      reference += " AT (VERSION => " + snapshotId + ")";
    }
    return reference;
  }
}
