package dev.icefloe.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Columnar readers only: Spark gets the Flight stream's vectors, never rows from us. */
final class ColumnarReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final FlightOptions options;
  private final StructType readSchema;

  ColumnarReaderFactory(FlightOptions options, StructType readSchema) {
    this.options = options;
    this.readSchema = readSchema;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("icefloe-flight reads columnar batches only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new EndpointBatchReader(options, (EndpointPartition) partition, readSchema);
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }
}
