package dev.icefloe.spark;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The scan of a stream with option {@code include}: the server's change scan as sent, the
 * table's columns plus {@code _seq}, {@code _snapshot_id} and {@code _operation} ("insert", or
 * "delete" for the rows an overwrite or delete removed, with {@code include} "all").
 */
final class ChangeScanBuilder implements ScanBuilder, Scan {
  private final FlightOptions options;
  private final StructType schema;

  ChangeScanBuilder(FlightOptions options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  static StructType withChangeColumns(StructType tableSchema) {
    return tableSchema.add("_seq", DataTypes.LongType, true).add("_snapshot_id", DataTypes.LongType, true)
        .add("_operation", DataTypes.StringType, true);
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "IcefloeFlightChangeScan[" + options.table + ", include=" + options.include + "]";
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpoint) {
    return new CommitStream(options, schema);
  }
}
