package dev.icefloe.spark;

import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * How many rows a write task puts in one Arrow batch of its DoPut.
 *
 * <p>Why adaptive: per batch, both sides pay a fixed cost (the task's finish/reset and the
 * stream's flow control, the server's batch validation, conversion and queueing), so larger
 * batches cost less CPU: in an interleaved 4M-row A/B on 2 cores, 131072-row batches took about
 * 20% less CPU (task and server together) than 16384. But a fixed row count makes batches of
 * gigabytes for wide rows. So the rows per batch come from a byte cap (option {@code
 * writeBatchBytes}, default {@link #DEFAULT_BATCH_BYTES}) divided by the schema's estimated
 * Arrow width of a row, at most {@link #MAX_ROWS}; an explicit {@code writeBatchRows} replaces
 * that estimate. The estimate cannot know a string's real length, so the flat converter also
 * ends a batch as soon as the bytes it holds reach the cap ({@link #full}).
 */
public final class WriteBatchSizing {
  /** About two batches fit the DoPut's 4 MiB send queue (PutBackpressure) with room to spare
   * for a schema of a few columns; a batch's Arrow buffers are this much memory per task. */
  public static final long DEFAULT_BATCH_BYTES = 8L * 1024 * 1024;
  /** More rows per batch gained nothing measurable over 131072 (the fixed cost per batch is
   * already small there) and only delays the first bytes on the wire. */
  public static final int MAX_ROWS = 131_072;

  private WriteBatchSizing() {}

  /** Rows per batch: {@code explicitRows} when given, else the rows of {@code capBytes} at
   * the schema's estimated width (at least 1, at most {@link #MAX_ROWS}). */
  public static int rowsPerBatch(StructType schema, Integer explicitRows, long capBytes) {
    if (explicitRows != null) {
      return explicitRows;
    }
    long rows = capBytes / estimatedRowBytes(schema);
    return (int) Math.max(1, Math.min(MAX_ROWS, rows));
  }

  /** A row's estimated bytes in Arrow buffers (at least 1): fixed widths exactly, a validity
   * bit per column, and for strings, binary and nested columns Spark's own default size of the
   * type (20 bytes a string, 100 a binary) plus their offsets. */
  public static long estimatedRowBytes(StructType schema) {
    double bytes = 0;
    for (StructField field : schema.fields()) {
      bytes += 1.0 / 8 + columnBytes(field.dataType());
    }
    return Math.max(1, (long) Math.ceil(bytes));
  }

  private static double columnBytes(DataType type) {
    if (type instanceof BooleanType) {
      return 1.0 / 8;
    }
    if (type instanceof ByteType) {
      return 1;
    }
    if (type instanceof ShortType) {
      return 2;
    }
    if (type instanceof IntegerType || type instanceof DateType || type instanceof FloatType) {
      return 4;
    }
    if (type instanceof DecimalType) {
      return 16; // Arrow's decimal128, whatever the precision
    }
    if (type instanceof StringType || type instanceof BinaryType) {
      return 4 + type.defaultSize();
    }
    // long, double, timestamps: 8 (their default size); nested: Spark's estimate of the
    // values plus an offset.
    return type.defaultSize() + (type.defaultSize() > 8 ? 4 : 0);
  }

  /** Whether a batch holding {@code bytes} of Arrow data has reached the cap. */
  public static boolean full(long bytes, long capBytes) {
    return bytes >= capBytes;
  }
}
