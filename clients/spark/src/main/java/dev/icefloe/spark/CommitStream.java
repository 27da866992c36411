package dev.icefloe.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.Location;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.types.StructType;

/**
 * {@code spark.readStream.format("icefloe-flight")}: micro-batches over the table's commits.
 * Offsets are commit sequence numbers ({@code {"seq": N}}); the batch {@code (S1, S2]} reads
 * the server's change scan of that range, which is deterministic, so a batch replayed from
 * Spark's checkpoint after a restart reads the same rows. {@code maxCommitsPerTrigger} caps the
 * commits per batch.
 */
final class CommitStream implements MicroBatchStream, SupportsAdmissionControl {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final FlightOptions options;
  private final StructType readSchema;
  private CommitFeed feed;
  /** The last planned range and its partitions: Spark plans a micro-batch's scan more than once
   * (the batch's own plan, and again for each action a foreachBatch sink runs on it: four
   * GetFlightInfo calls per batch in a trace), and a range's change scan is deterministic. */
  private long plannedAfter = -1;
  private long plannedUntil = -1;
  private InputPartition[] planned;
  /** The driver's connection for planning, kept across batches (a connection per batch cost a
   * TCP and HTTP/2 set-up on the commit-to-row path). */
  private FlightConnection planning;

  CommitStream(FlightOptions options, StructType readSchema) {
    this.options = options;
    this.readSchema = readSchema;
  }

  /** An offset: a commit sequence number. */
  static final class SeqOffset extends Offset {
    final long seq;

    SeqOffset(long seq) {
      this.seq = seq;
    }

    @Override
    public String json() {
      return "{\"seq\":" + seq + "}";
    }
  }

  @Override
  public Offset initialOffset() {
    String start = options.startingOffsets.toLowerCase(Locale.ROOT);
    if (start.equals("earliest")) {
      return new SeqOffset(0);
    }
    if (start.equals("latest")) {
      return new SeqOffset(CommitFeed.head(options));
    }
    return new SeqOffset(Long.parseLong(start));
  }

  @Override
  public Offset deserializeOffset(String json) {
    try {
      return new SeqOffset(JSON.readTree(json).get("seq").asLong());
    } catch (java.io.IOException | NullPointerException e) {
      throw new IcefloeFlightException("not an icefloe-flight offset: " + FlightOptions.cut(json));
    }
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return options.maxCommitsPerTrigger == null ? ReadLimit.allAvailable()
        : ReadLimit.maxFiles(options.maxCommitsPerTrigger);
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(start, limit) is used instead");
  }

  @Override
  public synchronized Offset latestOffset(Offset startOffset, ReadLimit limit) {
    long start = ((SeqOffset) startOffset).seq;
    if (feed == null || feed.after > start) {
      if (feed != null) {
        feed.close();
      }
      feed = new CommitFeed(options, options.table, start);
      feed.awaitCaughtUp();
    }
    Integer most = limit instanceof ReadMaxFiles ? ((ReadMaxFiles) limit).maxFiles() : null;
    long latest = feed.latest(start, most);
    if (latest > start) {
      LatencyTrace.mark("offset-seen", options.table, latest);
    }
    return new SeqOffset(latest);
  }

  @Override
  public synchronized InputPartition[] planInputPartitions(Offset start, Offset end) {
    long after = ((SeqOffset) start).seq;
    long until = ((SeqOffset) end).seq;
    if (until <= after) {
      return new InputPartition[0];
    }
    if (after == plannedAfter && until == plannedUntil) {
      return planned.clone();
    }
    LatencyTrace.mark("plan-start", options.table, until);
    ObjectNode command = JSON.createObjectNode();
    command.put("changes", options.table);
    command.put("after", after);
    command.put("until", until);
    command.put("include", options.include == null ? "appends" : options.include);
    try {
      if (planning == null) {
        planning = FlightConnection.open(options);
      }
      FlightInfo info = planning.client.getInfo(
          FlightDescriptor.command(command.toString().getBytes(StandardCharsets.UTF_8)), planning.callOptions());
      List<InputPartition> out = new ArrayList<>();
      for (FlightEndpoint endpoint : info.getEndpoints()) {
        List<Location> locations = endpoint.getLocations();
        out.add(new EndpointPartition(endpoint.getTicket().getBytes(),
            locations.isEmpty() ? null : locations.get(0).getUri().toString()));
      }
      LatencyTrace.mark("plan-end", options.table, until);
      planned = out.toArray(new InputPartition[0]);
      plannedAfter = after;
      plannedUntil = until;
      return planned.clone();
    } catch (FlightRuntimeException e) {
      closePlanning(); // the next batch connects afresh (the server may have restarted)
      throw IcefloeFlightException.from("the change scan (" + after + ", " + until + "] of " + options.table
          + " failed", e);
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ColumnarReaderFactory(options, readSchema);
  }

  @Override
  public synchronized void commit(Offset end) {
    // The server keeps the data (a range's change scan is deterministic); only forget the seqs.
    if (feed != null) {
      feed.forget(((SeqOffset) end).seq);
    }
  }

  @Override
  public synchronized void stop() {
    if (feed != null) {
      feed.close();
      feed = null;
    }
    closePlanning();
  }

  private void closePlanning() {
    if (planning != null) {
      planning.close();
      planning = null;
    }
  }
}
