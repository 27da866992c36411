package dev.icefloe.spark;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.PutResult;
import org.apache.arrow.flight.SyncPutListener;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;

/** The task side of a write: one staged DoPut per task attempt. */
final class StagingWriterFactory implements DataWriterFactory, StreamingDataWriterFactory {
  private static final long serialVersionUID = 1L;
  static final String STAGE_HEADER = "x-icefloe-stage";

  private final FlightOptions options;
  private final StructType schema;
  private final String job;

  StagingWriterFactory(FlightOptions options, StructType schema, String job) {
    this.options = options;
    this.schema = schema;
    this.job = job;
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
    return new StagingWriter(job);
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
    return new StagingWriter(job + "-" + epochId);
  }

  /** Rows go into Arrow vectors and out as DoPut batches ({@link WriteBatchSizing}: rows per
   * batch from writeBatchRows or the byte cap and the schema; the flat converter also ends a
   * batch whose real bytes reach the cap); commit() ends the
   * stream and answers the staging token. Flat schemas go through {@link FlatArrowWriter}
   * (unless option writeConverter is "spark"); others through Spark's own ArrowWriter. */
  private final class StagingWriter implements DataWriter<InternalRow> {
    private FlightConnection connection;
    private VectorSchemaRoot root;
    private ArrowWriter arrow;
    private FlatArrowWriter flat;
    private FlightClient.ClientStreamListener put;
    private SyncPutListener answers;
    private long rows;
    private int pending;
    private int batchRows;
    private final String stageJob;

    StagingWriter(String stageJob) {
      this.stageJob = stageJob.replaceAll("[^A-Za-z0-9._-]", "-");
    }

    private void start() {
      connection = FlightConnection.open(options);
      batchRows = WriteBatchSizing.rowsPerBatch(schema, options.writeBatchRows, options.writeBatchBytes);
      root = VectorSchemaRoot.create(
          ArrowUtils.toArrowSchema(schema, "UTC", true, false), connection.allocator);
      if (options.flatWriteConverter) {
        flat = FlatArrowWriter.create(root, schema, batchRows);
      }
      if (flat == null) {
        arrow = ArrowWriter.create(root);
      }
      answers = new SyncPutListener();
      CallOption[] call = connection.callOptions(Map.of(STAGE_HEADER, stageJob));
      CallOption[] withThreshold = java.util.Arrays.copyOf(call, call.length + 1);
      withThreshold[call.length] = new PutBackpressure.ReadyThreshold(PutBackpressure.READY_THRESHOLD_BYTES);
      put = connection.client.startPut(FlightConnection.tablePath(options.table), root, answers, withThreshold);
    }

    @Override
    public void write(InternalRow row) {
      if (connection == null) {
        start();
      }
      if (flat != null) {
        flat.write(row);
      } else {
        arrow.write(row);
      }
      rows++;
      if (++pending >= batchRows
          || (flat != null && WriteBatchSizing.full(flat.bytes(), options.writeBatchBytes))) {
        flush();
      }
    }

    private void flush() {
      if (pending == 0) {
        return;
      }
      if (flat != null) {
        flat.finish();
      } else {
        arrow.finish();
      }
      PutBackpressure.awaitReady(put, answers); // (putNext itself would spin until then)
      put.putNext();
      if (flat != null) {
        flat.reset();
      } else {
        arrow.reset();
      }
      pending = 0;
    }

    @Override
    public WriterCommitMessage commit() {
      if (connection == null) {
        return new StagingWriteBuilderMessages().empty();
      }
      try {
        flush();
        put.completed();
        PutResult result = answers.read();
        put.getResult();
        if (result == null) {
          throw new IcefloeFlightException("the server answered no staging token for " + options.table);
        }
        try (ArrowBuf metadata = result.getApplicationMetadata()) {
          byte[] bytes = new byte[(int) metadata.readableBytes()];
          metadata.getBytes(0, bytes);
          String answer = new String(bytes, StandardCharsets.UTF_8);
          return new StagedWriteBuilder.StagedMessage(StagedWriteBuilder.tokenOf(answer, options.table), rows);
        }
      } catch (FlightRuntimeException e) {
        throw IcefloeFlightException.from("staging rows for " + options.table + " failed", e);
      } catch (java.util.concurrent.ExecutionException e) {
        if (e.getCause() instanceof FlightRuntimeException) {
          throw IcefloeFlightException.from("staging rows for " + options.table + " failed",
              (FlightRuntimeException) e.getCause());
        }
        throw new IcefloeFlightException("staging rows for " + options.table + " failed: " + e.getCause(), e);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IcefloeFlightException("staging rows for " + options.table + " was interrupted", e);
      }
    }

    @Override
    public void abort() {
      if (put != null) {
        put.error(new RuntimeException("the Spark task failed; nothing of it is staged"));
      }
    }

    @Override
    public void close() {
      if (root != null) {
        root.close();
      }
      if (connection != null) {
        connection.close();
      }
    }
  }

  /** Empty partitions stage nothing. */
  private static final class StagingWriteBuilderMessages {
    WriterCommitMessage empty() {
      return new StagedWriteBuilder.StagedMessage(null, 0);
    }
  }
}
