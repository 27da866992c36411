package dev.icefloe.spark;

import java.util.List;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Streams one endpoint: each Flight message is loaded into the stream's vectors and handed to
 * Spark as {@code ArrowColumnVector}s over those same buffers (no rows, no copy). Spark is done
 * with a batch when it asks for the next one, which is when the stream reloads the vectors.
 */
final class EndpointBatchReader implements PartitionReader<ColumnarBatch> {
  private final FlightConnection connection;
  private final FlightStream stream;
  private final StructType readSchema;
  private ColumnarBatch current;
  private VectorSchemaRoot checkedRoot;
  private ArrowColumnVector[] columns;
  private boolean traceFirst = LatencyTrace.on();

  EndpointBatchReader(FlightOptions options, EndpointPartition partition, StructType readSchema) {
    this.readSchema = readSchema;
    LatencyTrace.mark("reader-open", options.table == null ? "query" : options.table, partition.ticket.length);
    String uri = partition.location != null ? partition.location : options.uri;
    connection = FlightConnection.open(options, uri);
    try {
      stream = connection.stream(partition.ticket);
    } catch (FlightRuntimeException e) {
      connection.close();
      throw IcefloeFlightException.from("reading an endpoint failed", e);
    }
  }

  @Override
  public boolean next() {
    try {
      while (stream.next()) {
        VectorSchemaRoot root = stream.getRoot();
        if (root.getRowCount() == 0) {
          continue;
        }
        if (root != checkedRoot) {
          columns = wrap(root);
          checkedRoot = root;
        }
        current = new ColumnarBatch(columns, root.getRowCount());
        if (traceFirst) {
          traceFirst = false;
          LatencyTrace.mark("reader-first-batch", "rows", root.getRowCount());
        }
        return true;
      }
      return false;
    } catch (FlightRuntimeException e) {
      throw IcefloeFlightException.from("reading an endpoint failed", e);
    }
  }

  /** Spark's column vectors over the root's vectors, after checking their types are the ones
   * the scan promised (a mismatch would read garbage, not fail). */
  private ArrowColumnVector[] wrap(VectorSchemaRoot root) {
    StructField[] expected = readSchema.fields();
    List<FieldVector> vectors = root.getFieldVectors();
    ArrowColumnVector[] out = new ArrowColumnVector[expected.length];
    for (int i = 0; i < expected.length; i++) {
      // By name: a change scan sends the table's columns plus _seq, _snapshot_id, _operation.
      FieldVector vector = root.getVector(expected[i].name());
      if (vector == null && vectors.size() == expected.length) {
        vector = vectors.get(i);
      }
      if (vector == null) {
        throw new IcefloeFlightException("the server sent no column " + expected[i].name());
      }
      String actual = ArrowSparkTypes.sparkType(vector.getField()).catalogString();
      if (!actual.equals(expected[i].dataType().catalogString())) {
        throw new IcefloeFlightException("column " + expected[i].name() + ": the server sent " + actual
            + " where the scan expects " + expected[i].dataType().catalogString()
            + " (did the table's schema change since the DataFrame was defined?)");
      }
      out[i] = new ArrowColumnVector(vector);
    }
    return out;
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public void close() throws java.io.IOException {
    try {
      stream.close();
    } catch (Exception e) {
      throw new java.io.IOException("closing the Flight stream failed", e);
    } finally {
      connection.close();
    }
  }
}
