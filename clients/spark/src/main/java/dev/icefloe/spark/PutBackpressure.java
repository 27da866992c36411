package dev.icefloe.spark;

import io.grpc.stub.AbstractStub;
import java.util.concurrent.locks.LockSupport;
import org.apache.arrow.flight.CallOptions;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.SyncPutListener;

/**
 * Flow control of a DoPut without burning a core. Arrow Flight's {@code putNext} waits for
 * the gRPC stream to take another message by spinning on {@code isReady()} (Arrow Java 18.3,
 * {@code FlightClient.PutObserver.waitUntilStreamReady}): while the server was busy encoding
 * Parquet, each Spark task spun a core the server needed (the profile of a 10M-row write had
 * about 40% of the executor's CPU in that loop). The writer waits here first, parked, so the
 * spin finds the stream ready; and the stream counts as ready until {@link
 * #READY_THRESHOLD_BYTES} are queued (gRPC's default is 32 KiB, less than one batch), so the
 * next batch is converted while the previous one is still on the wire.
 */
final class PutBackpressure {
  /** Below one default batch of a few columns (131072 rows, about 5 MB): a task converts its
   * next batch while the last one is still queued, and queues it once the last is mostly sent,
   * so at most about two batches (WriteBatchSizing's cap each) wait per task. */
  static final int READY_THRESHOLD_BYTES = 4 * 1024 * 1024;
  private static final long FIRST_PARK_NS = 20_000;
  private static final long MAX_PARK_NS = 1_000_000;

  private PutBackpressure() {}

  /** Park until {@code put} takes another message (or the call has failed: putNext then
   * reports it). */
  static void awaitReady(FlightClient.ClientStreamListener put, SyncPutListener answers) {
    long parkNs = FIRST_PARK_NS;
    while (!put.isReady() && !answers.isCancelled()) {
      LockSupport.parkNanos(parkNs);
      if (Thread.interrupted()) {
        Thread.currentThread().interrupt();
        throw new IcefloeFlightException("the write was interrupted while the server was taking its rows");
      }
      parkNs = Math.min(MAX_PARK_NS, parkNs * 2);
    }
  }

  /** A call option raising the stream's on-ready threshold (bytes queued before it reports
   * not ready). */
  static final class ReadyThreshold implements CallOptions.GrpcCallOption {
    private final int bytes;

    ReadyThreshold(int bytes) {
      this.bytes = bytes;
    }

    @Override
    public <T extends AbstractStub<T>> T wrapStub(T stub) {
      return stub.withOnReadyThreshold(bytes);
    }
  }
}
