package dev.icefloe.spark;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Wall-clock marks along a stream's commit-to-row path (feed event, offset seen, batch planned,
 * endpoint opened), logged at DEBUG on logger {@code dev.icefloe.spark.trace} with epoch
 * milliseconds, so a trace can be lined up with the writer's and the sink's own clocks (the
 * log's own timestamps have whole seconds). Off unless that logger is at DEBUG.
 */
final class LatencyTrace {
  private static final Logger LOG = LoggerFactory.getLogger("dev.icefloe.spark.trace");

  private LatencyTrace() {}

  static boolean on() {
    return LOG.isDebugEnabled();
  }

  static void mark(String what, String table, long value) {
    if (LOG.isDebugEnabled()) {
      LOG.debug("trace {} {} {} at_ms={}", what, table, value, System.currentTimeMillis());
    }
  }
}
