package dev.icefloe.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code df.write.format("icefloe-flight").mode("append" | "overwrite")}: exactly once through
 * the server's two-phase appends. Each task stages its rows (files written and fsync'd, nothing
 * committed) and hands its signed token to the driver, which commits every successful task's
 * token in one {@code icefloe.commit-staged} call keyed by the write's query id: one snapshot
 * per job, and a retried commit is answered as a duplicate. A failed task attempt's staging is
 * never committed (Spark hands the driver only the commit messages of the attempts it chose).
 */
final class StagedWriteBuilder implements WriteBuilder, SupportsTruncate {
  static final String COMMIT_STAGED = "icefloe.commit-staged";
  static final String ABORT_STAGED = "icefloe.abort-staged";
  static final int COMMIT_RETRIES = 4;
  private static final Logger LOG = LoggerFactory.getLogger(StagedWriteBuilder.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final FlightOptions options;
  private final LogicalWriteInfo info;
  private boolean overwrite;
  /** Create the table from the rows' schema first (a save mode's write to a missing table). */
  private final boolean create;

  StagedWriteBuilder(FlightOptions options, LogicalWriteInfo info) {
    this(options, info, false);
  }

  StagedWriteBuilder(FlightOptions options, LogicalWriteInfo info, boolean create) {
    this.options = options;
    this.info = info;
    this.create = create;
  }

  @Override
  public WriteBuilder truncate() {
    overwrite = true;
    return this;
  }

  @Override
  public Write build() {
    final String key = "spark-jvm:" + info.queryId();
    final boolean replace = overwrite;
    final boolean created;
    // The driver logs in once; tasks carry the bearer token, never the password. The rows'
    // schema is checked against the table's here, before any task runs.
    try (FlightConnection connection = FlightConnection.open(options)) {
      created = create && createFromRows(connection);
      try {
        WriteSchemaCheck.check(options.table, info.schema(),
            connection.schema("SELECT * FROM " + SqlText.table(options.table)));
      } catch (RuntimeException e) {
        if (created) {
          dropCreated(options); // no job will run, so no abort would
        }
        throw e;
      }
      LOG.debug("icefloe-flight write to {} (job {})", options.table, key);
    }
    return new Write() {
      @Override
      public String description() {
        return "IcefloeFlightStagedWrite[" + options.table + (replace ? ", overwrite" : ", append") + "]";
      }

      @Override
      public BatchWrite toBatch() {
        return new StagedBatchWrite(options, info.schema(), key, replace, created);
      }

      @Override
      public StreamingWrite toStreaming() {
        if (replace) {
          throw new UnsupportedOperationException(
              "icefloe-flight streams append: use outputMode append (complete mode would replace the table)");
        }
        return new StagedStreamingWrite(options, info.schema(), key);
      }
    };
  }

  /** Create the table from the rows' schema; true if this write created it. */
  private boolean createFromRows(FlightConnection connection) {
    try {
      connection.update(SparkDdl.createTable(options.table, info.schema().asNullable(), null));
      LOG.info("icefloe-flight: created {} from the written rows' schema", options.table);
      return true;
    } catch (IcefloeFlightException e) {
      if (e.code() != org.apache.arrow.flight.FlightStatusCode.ALREADY_EXISTS) {
        throw e; // (ALREADY_EXISTS: another writer created it first; the check below decides)
      }
      return false;
    }
  }

  /**
   * Undo the create of a job that failed: a save mode's append or overwrite to a missing table
   * created it, and a failed job must leave no table behind (as a failed CREATE TABLE AS SELECT
   * leaves none). Only a table that still has no snapshot is dropped: if anyone's commit (a
   * writer that found the table made, or this job's own commit whose answer was lost) landed in
   * it, it holds rows that are not this job's to remove. Idempotent: a table already gone is
   * fine. Best effort, as aborting staged files is: a failure is logged, and the abort goes on.
   */
  static void dropCreated(FlightOptions options) {
    try (FlightConnection connection = FlightConnection.open(options)) {
      Object snapshots = connection.firstValue(
          "SELECT count(*) FROM " + SqlText.metadataTable(options.table, "snapshots"));
      if (snapshots == null || ((Number) snapshots).longValue() != 0) {
        LOG.info("icefloe-flight: the failed write created {}, but commits landed in it since; it stays",
            options.table);
        return;
      }
      connection.update("DROP TABLE " + SqlText.table(options.table));
      LOG.info("icefloe-flight: dropped {} again: the write that created it failed", options.table);
    } catch (IcefloeFlightException e) {
      if (e.code() == org.apache.arrow.flight.FlightStatusCode.NOT_FOUND) {
        return; // gone already (a second abort, or someone dropped it)
      }
      LOG.warn("icefloe-flight: dropping {}, created by a write that failed, failed: {}", options.table,
          e.getMessage());
    }
  }

  /** The driver's side of a write: hands out the task writers, commits or aborts their tokens. */
  static final class StagedBatchWrite implements BatchWrite {
    private final FlightOptions options;
    private final org.apache.spark.sql.types.StructType schema;
    private final String key;
    private final boolean overwrite;
    /** This job created the table (create-on-write): an abort drops it again. */
    private final boolean created;

    StagedBatchWrite(FlightOptions options, org.apache.spark.sql.types.StructType schema, String key,
        boolean overwrite, boolean created) {
      this.options = options;
      this.schema = schema;
      this.key = key;
      this.overwrite = overwrite;
      this.created = created;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
      return new StagingWriterFactory(options, schema, key);
    }

    @Override
    public boolean useCommitCoordinator() {
      return true; // one committed attempt per partition, even with speculation
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      List<String> tokens = tokens(messages);
      if (tokens.isEmpty() && !overwrite) {
        return; // nothing to append: no empty snapshot
      }
      commitTokens(options, tokens, key, overwrite);
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      abortTokens(options, tokens(messages));
      if (created) {
        dropCreated(options);
      }
    }
  }

  /**
   * {@code writeStream.format("icefloe-flight")}: one commit per epoch, keyed by the query id
   * (kept in the checkpoint) and the epoch. An epoch Spark replays after a restart (its commit
   * landed, the checkpoint's commit log did not) stages again and its commit answers
   * "duplicate": the rows land once.
   */
  static final class StagedStreamingWrite implements StreamingWrite {
    private final FlightOptions options;
    private final org.apache.spark.sql.types.StructType schema;
    private final String key;

    StagedStreamingWrite(FlightOptions options, org.apache.spark.sql.types.StructType schema, String key) {
      this.options = options;
      this.schema = schema;
      this.key = key;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo physical) {
      return new StagingWriterFactory(options, schema, key);
    }

    @Override
    public boolean useCommitCoordinator() {
      return true;
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {
      List<String> tokens = tokens(messages);
      if (!tokens.isEmpty()) {
        commitTokens(options, tokens, key + ":epoch-" + epochId, false);
      }
    }

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {
      abortTokens(options, tokens(messages));
    }
  }

  /** Commit the staged tokens as one snapshot, exactly once per {@code key}. */
  static void commitTokens(FlightOptions options, List<String> tokens, String key, boolean overwrite) {
    ObjectNode body = JSON.createObjectNode();
    body.put("table", options.table);
    ArrayNode list = body.putArray("tokens");
    tokens.forEach(list::add);
    body.put("idempotency_key", key);
    body.put("mode", overwrite ? "overwrite" : "append");
    // The key makes the commit exactly once, so a commit whose answer was lost (the server
    // unreachable) is retried safely: a retry of a landed commit answers "duplicate": true.
    long delayMs = 200;
    for (int attempt = 0; ; attempt++) {
      try (FlightConnection connection = FlightConnection.open(options)) {
        String answer = connection.action(COMMIT_STAGED, body.toString());
        LOG.info("icefloe-flight write of {} committed: {}", options.table, answer);
        return;
      } catch (IcefloeFlightException e) {
        if (attempt >= COMMIT_RETRIES || !unavailable(e)) {
          throw e;
        }
        LOG.info("icefloe-flight: commit of {} unanswered ({}); retrying in {} ms", options.table,
            e.getMessage(), delayMs);
        sleep(delayMs);
        delayMs = Math.min(5000, delayMs * 2);
      }
    }
  }

  private static boolean unavailable(IcefloeFlightException e) {
    return e.getCause() instanceof org.apache.arrow.flight.FlightRuntimeException
        && ((org.apache.arrow.flight.FlightRuntimeException) e.getCause()).status().code()
            == org.apache.arrow.flight.FlightStatusCode.UNAVAILABLE;
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IcefloeFlightException("interrupted while retrying the commit", e);
    }
  }

  static void abortTokens(FlightOptions options, List<String> tokens) {
    if (tokens.isEmpty()) {
      return;
    }
    ObjectNode body = JSON.createObjectNode();
    body.put("table", options.table);
    ArrayNode list = body.putArray("tokens");
    tokens.forEach(list::add);
    try (FlightConnection connection = FlightConnection.open(options)) {
      connection.action(ABORT_STAGED, body.toString());
    } catch (RuntimeException e) {
      // Uncommitted staged files also go with the server's orphan removal.
      LOG.warn("icefloe-flight: aborting the staged files of {} failed: {}", options.table, e.getMessage());
    }
  }

  private static List<String> tokens(WriterCommitMessage[] messages) {
    List<String> out = new ArrayList<>();
    for (WriterCommitMessage m : messages) {
      if (m instanceof StagedMessage && ((StagedMessage) m).token != null) {
        out.add(((StagedMessage) m).token);
      }
    }
    return out;
  }

  /** What one task staged: its signed token (null for an empty partition) and row count. */
  static final class StagedMessage implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final String token;
    final long rows;

    StagedMessage(String token, long rows) {
      this.token = token;
      this.rows = rows;
    }
  }

  static String tokenOf(String answer, String table) {
    try {
      JsonNode node = JSON.readTree(answer);
      JsonNode token = node.get("token");
      if (token == null || !token.isTextual()) {
        throw new IcefloeFlightException("the server did not stage the rows for " + table + " (no token in its answer)");
      }
      return token.asText();
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IcefloeFlightException("the server's staging answer for " + table + " is not JSON", e);
    }
  }
}
