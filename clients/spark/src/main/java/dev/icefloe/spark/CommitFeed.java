package dev.icefloe.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.NavigableSet;
import java.util.concurrent.ConcurrentSkipListSet;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A background subscription to the server's commit feed ({@code commits.v1}) for one table: the
 * commit sequence numbers it pushes are what a micro-batch stream's next trigger sees, so a new
 * commit is visible at once, with no polling interval.
 */
final class CommitFeed implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(CommitFeed.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final FlightOptions options;
  private final String table;
  final long after;
  static final long RECONNECT_MIN_MS = 100;
  /** The feed's idle heartbeat; the first one after the backlog says "caught up". */
  static final int HEARTBEAT_MS = 250;
  static final long CATCH_UP_WAIT_MS = 10_000;
  private final java.util.concurrent.CountDownLatch caughtUp = new java.util.concurrent.CountDownLatch(1);
  static final long RECONNECT_MAX_MS = 2000;
  private final NavigableSet<Long> seqs = new ConcurrentSkipListSet<>();
  private volatile RuntimeException failure;
  private volatile boolean closed;
  private final Thread thread;
  private final java.util.concurrent.atomic.AtomicReference<FlightConnection> connectionRef =
      new java.util.concurrent.atomic.AtomicReference<>();
  private final java.util.concurrent.atomic.AtomicReference<FlightClient.ExchangeReaderWriter> exchangeRef =
      new java.util.concurrent.atomic.AtomicReference<>();

  CommitFeed(FlightOptions options, String table, long after) {
    this.options = options;
    this.table = table;
    this.after = after;
    thread = new Thread(this::follow, "icefloe-commit-feed-" + table);
    thread.setDaemon(true);
    thread.start();
  }

  static byte[] command(String table, String after) {
    ObjectNode command = JSON.createObjectNode();
    command.put("feed", "commits.v1");
    if (after.chars().allMatch(Character::isDigit)) {
      command.put("after", Long.parseLong(after));
    } else {
      command.put("after", after);
    }
    command.putArray("tables").add(table);
    command.put("heartbeat_ms", HEARTBEAT_MS);
    return command.toString().getBytes(StandardCharsets.UTF_8);
  }

  /** The feed's head (its newest commit seq, any table) from the hello message. */
  static long head(FlightOptions options) {
    try (FlightConnection connection = FlightConnection.open(options)) {
      FlightClient.ExchangeReaderWriter exchange = connection.client.doExchange(
          FlightDescriptor.command(command(options.table, "latest")), connection.callOptions());
      try {
        FlightStream reader = exchange.getReader();
        while (reader.next()) {
          JsonNode hello = metadata(reader).path("hello");
          if (hello.has("head")) {
            return hello.get("head").asLong();
          }
        }
        throw new IcefloeFlightException("the commit feed ended before its hello message");
      } finally {
        exchange.getReader().cancel("done", null);
        closeQuietly(exchange);
      }
    } catch (FlightRuntimeException e) {
      throw IcefloeFlightException.from("subscribing to the commit feed failed", e);
    }
  }

  private static JsonNode metadata(FlightStream reader) {
    ArrowBuf buf = reader.getLatestMetadata();
    if (buf == null || buf.readableBytes() == 0) {
      return JSON.createObjectNode();
    }
    byte[] bytes = new byte[(int) buf.readableBytes()];
    buf.getBytes(0, bytes);
    try {
      return JSON.readTree(bytes);
    } catch (java.io.IOException e) {
      return JSON.createObjectNode();
    }
  }

  /** Follows the feed, reconnecting after {@code after} = the last seq seen when the server
   * goes away (a restart): the feed then gives every later event exactly once. Only a refusal
   * (a bad table, an expired cursor, no permission) ends it; that failure reaches the next
   * trigger. */
  private void follow() {
    long lastSeen = after;
    long delayMs = RECONNECT_MIN_MS;
    while (!closed) {
      try {
        FlightConnection connection = FlightConnection.open(options);
        connectionRef.set(connection);
        FlightClient.ExchangeReaderWriter exchange = connection.client.doExchange(
            FlightDescriptor.command(command(table, Long.toString(lastSeen))), connection.callOptions());
        exchangeRef.set(exchange);
        if (closed) {
          return; // (finally releases it) closed while connecting
        }
        FlightStream reader = exchange.getReader();
        while (!closed && reader.next()) {
          delayMs = RECONNECT_MIN_MS; // connected: the next outage starts the backoff afresh
          VectorSchemaRoot root = reader.getRoot();
          if (root.getRowCount() == 0) {
            // A heartbeat comes only when the feed is idle: every commit up to now has been sent.
            if (metadata(reader).has("heartbeat")) {
              caughtUp.countDown();
            }
            continue;
          }
          BigIntVector seq = (BigIntVector) root.getVector("seq");
          for (int i = 0; i < root.getRowCount(); i++) {
            long s = seq.get(i);
            LatencyTrace.mark("feed-event", table, s);
            seqs.add(s);
            lastSeen = Math.max(lastSeen, s);
          }
        }
        if (!closed) {
          LOG.info("icefloe-flight: the commit feed of {} ended; reconnecting after seq {}", table, lastSeen);
        }
      } catch (FlightRuntimeException e) {
        if (closed) {
          return;
        }
        if (!retryable(e.status().code())) {
          failure = IcefloeFlightException.from("the commit feed of " + table + " failed", e);
          LOG.warn("icefloe-flight: {}", failure.getMessage());
          caughtUp.countDown(); // the next trigger reports the failure rather than wait
          return;
        }
        LOG.info("icefloe-flight: the commit feed of {} is unreachable ({}); reconnecting in {} ms after seq {}",
            table, e.status().code(), delayMs, lastSeen);
      } catch (RuntimeException e) {
        if (!closed) {
          failure = e;
          caughtUp.countDown();
          LOG.warn("icefloe-flight: the commit feed of {} failed", table, e);
        }
        return;
      } finally {
        release();
      }
      if (!pause(delayMs)) {
        return;
      }
      delayMs = Math.min(RECONNECT_MAX_MS, delayMs * 2);
    }
  }

  static boolean retryable(FlightStatusCode code) {
    return code == FlightStatusCode.UNAVAILABLE || code == FlightStatusCode.CANCELLED
        || code == FlightStatusCode.INTERNAL || code == FlightStatusCode.UNKNOWN
        || code == FlightStatusCode.TIMED_OUT;
  }

  private boolean pause(long ms) {
    try {
      Thread.sleep(ms);
      return !closed;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  /** Cancel and close the current exchange and connection, once (from either thread, no lock:
   * closing an exchange whose stream has not ended waits for its end, so cancel it first). */
  private void release() {
    FlightClient.ExchangeReaderWriter current = exchangeRef.getAndSet(null);
    if (current != null) {
      try {
        current.getReader().cancel("stream stopped", null);
      } catch (RuntimeException e) {
        LOG.debug("icefloe-flight: cancelling the feed: {}", e.getMessage());
      }
      closeQuietly(current);
    }
    FlightConnection open = connectionRef.getAndSet(null);
    if (open != null) {
      open.close();
    }
  }


  /** Wait (bounded) until the subscription has received the backlog of commits made before it
   * started, so the first trigger (and an availableNow query's only look) sees them. */
  void awaitCaughtUp() {
    try {
      if (!caughtUp.await(CATCH_UP_WAIT_MS, java.util.concurrent.TimeUnit.MILLISECONDS)) {
        LOG.info("icefloe-flight: the commit feed of {} has not caught up in {} ms; going on", table,
            CATCH_UP_WAIT_MS);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** The newest commit seq of the table after {@code start}, at most {@code most} commits on
   * (null: all); {@code start} itself when there is none. */
  long latest(long start, Integer most) {
    if (failure != null) {
      throw failure;
    }
    NavigableSet<Long> later = seqs.tailSet(start, false);
    if (later.isEmpty()) {
      return start;
    }
    if (most == null) {
      return later.last();
    }
    int n = 0;
    long seen = start;
    for (long s : later) {
      seen = s;
      if (++n >= most) {
        break;
      }
    }
    return seen;
  }

  /** Forget the seqs up to {@code seq} (committed by Spark): the set holds only what is ahead. */
  void forget(long seq) {
    seqs.headSet(seq, true).clear();
  }

  @Override
  public void close() {
    closed = true;
    FlightClient.ExchangeReaderWriter current = exchangeRef.get();
    if (current != null) {
      try {
        current.getReader().cancel("stream stopped", null);
      } catch (RuntimeException e) {
        LOG.debug("icefloe-flight: cancelling the feed: {}", e.getMessage());
      }
    }
    thread.interrupt(); // out of a reconnect pause
    try {
      thread.join(5000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    release();
  }

  private static void closeQuietly(FlightClient.ExchangeReaderWriter exchange) {
    try {
      exchange.close();
    } catch (Exception e) {
      LOG.debug("icefloe-flight: closing the feed exchange: {}", e.getMessage());
    }
  }
}
