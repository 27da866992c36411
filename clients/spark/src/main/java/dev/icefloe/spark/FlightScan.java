package dev.icefloe.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.Location;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One planned read: the statement is sent once, at planning, and the server's endpoints (disjoint
 * file groups of the pinned snapshot) become the input partitions.
 */
final class FlightScan implements Scan, Batch {
  private static final Logger LOG = LoggerFactory.getLogger(FlightScan.class);
  /** As Spark's file sources (spark.sql.files.openCostInBytes): no split smaller than this. */
  static final long MIN_SPLIT_BYTES = 4L * 1024 * 1024;

  private final FlightOptions options;
  private final String sql;
  private final StructType readSchema;
  private final int pushedPredicates;
  private final Integer limit;
  private final boolean aggregate;
  private InputPartition[] planned;

  FlightScan(FlightOptions options, String sql, StructType readSchema, int pushedPredicates, Integer limit,
      boolean aggregate) {
    this.options = options;
    this.sql = sql;
    this.readSchema = readSchema;
    this.pushedPredicates = pushedPredicates;
    this.limit = limit;
    this.aggregate = aggregate;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    // Shown by EXPLAIN: what the server is asked, so pushdown can be seen in the plan.
    return "IcefloeFlightScan[sql=" + sql + ", pushedPredicates=" + pushedPredicates
        + (limit != null ? ", limit=" + limit : "") + (aggregate ? ", aggregate=server" : "") + "]";
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public org.apache.spark.sql.connector.read.streaming.MicroBatchStream toMicroBatchStream(String checkpoint) {
    if (options.table == null) {
      throw new IcefloeFlightException("a stream reads a table's commits: give option table, not query");
    }
    return new CommitStream(options, readSchema);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    if (planned != null) {
      return planned;
    }
    try (FlightConnection connection = FlightConnection.open(options)) {
      FlightInfo info = connection.plan(sql, splitHeaders(connection));
      List<InputPartition> out = new ArrayList<>();
      for (FlightEndpoint endpoint : info.getEndpoints()) {
        List<Location> locations = endpoint.getLocations();
        String location = locations.isEmpty() ? null : locations.get(0).getUri().toString();
        out.add(new EndpointPartition(endpoint.getTicket().getBytes(), location));
      }
      LOG.debug("icefloe-flight scan in {} partitions: {}", out.size(), sql);
      planned = out.toArray(new InputPartition[0]);
      return planned;
    }
  }

  /** The split headers: without targetPartitionBytes the target shrinks (not below 4 MiB) so
   * the table makes about minPartitions partitions (default: Spark's default parallelism). */
  private Map<String, String> splitHeaders(FlightConnection connection) {
    Map<String, String> headers = new LinkedHashMap<>();
    long target = FlightOptions.DEFAULT_TARGET_BYTES;
    if (options.targetPartitionBytes != null) {
      target = options.targetPartitionBytes;
    } else if (options.table != null && !aggregate) {
      Long total = totalBytes(connection);
      if (total != null && total > 0) {
        int parallelism = options.minPartitions != null ? options.minPartitions : defaultParallelism();
        target = Math.min(FlightOptions.DEFAULT_TARGET_BYTES, Math.max(MIN_SPLIT_BYTES, total / parallelism));
      }
    }
    headers.put(FlightConnection.SCAN_TARGET_BYTES, Long.toString(target));
    headers.put(FlightConnection.SCAN_MAX_PARTITIONS, Integer.toString(options.maxPartitions));
    return headers;
  }

  private static int defaultParallelism() {
    return SparkSession.getActiveSession().isDefined()
        ? Math.max(1, SparkSession.getActiveSession().get().sparkContext().defaultParallelism())
        : Runtime.getRuntime().availableProcessors();
  }

  /** The pinned table's data bytes (its current snapshot summary's total-files-size), or null. */
  private Long totalBytes(FlightConnection connection) {
    try {
      Object summary = connection.firstValue("SELECT summary['total-files-size'] FROM "
          + SqlText.metadataTable(options.table, "snapshots") + " ORDER BY committed_at DESC LIMIT 1");
      if (summary == null) {
        return null;
      }
      String text = summary.toString().replaceAll("[^0-9]", "");
      return text.isEmpty() ? null : Long.parseLong(text);
    } catch (RuntimeException e) {
      LOG.debug("icefloe-flight: no table size for split sizing ({})", e.getMessage());
      return null;
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ColumnarReaderFactory(options, readSchema);
  }
}
