package dev.icefloe.spark;

import java.io.ByteArrayInputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.CallStatus;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Result;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.flight.auth2.BearerCredentialWriter;
import org.apache.arrow.flight.grpc.CredentialCallOption;
import org.apache.arrow.flight.sql.FlightSqlClient;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.util.ArrowUtils;

/**
 * One Flight SQL client with the options' TLS, credentials and headers. Opened where it is
 * used (driver or executor) and closed after; every call carries the bearer token and the
 * {@code headers.*} options.
 */
final class FlightConnection implements AutoCloseable {
  static final String SCAN_TARGET_BYTES = "icefloe.scan.target-partition-bytes";
  static final String SCAN_MAX_PARTITIONS = "icefloe.scan.max-partitions";

  final BufferAllocator allocator;
  final FlightClient client;
  final FlightSqlClient sql;
  private final FlightOptions options;
  private final BearerCapture bearerCapture = new BearerCapture();

  private FlightConnection(FlightOptions options, String uri) {
    this.options = options;
    allocator = ArrowUtils.rootAllocator().newChildAllocator("icefloe-flight", 0, Long.MAX_VALUE);
    FlightClient built;
    try {
      FlightClient.Builder builder = FlightClient.builder(allocator, new Location(URI.create(uri)))
          .intercept(bearerCapture);
      if (uri.startsWith("grpc+tls://")) {
        builder.useTls();
        if (options.tlsRootCerts != null) {
          builder.trustedCertificates(stream(FlightOptions.readText(options.tlsRootCerts, "tls.rootCerts")));
        }
        if (options.tlsSkipVerify) {
          builder.verifyServer(false);
        }
        if (options.tlsCertChain != null) {
          builder.clientCertificate(
              stream(FlightOptions.readText(options.tlsCertChain, "tls.certChain")),
              stream(FlightOptions.readText(options.tlsPrivateKey, "tls.privateKey")));
        }
      }
      built = builder.build();
    } catch (RuntimeException e) {
      allocator.close();
      throw e;
    }
    client = built;
    sql = new FlightSqlClient(client);
  }

  /** Connect to the options' server, exchanging user/password for a bearer token once. */
  static FlightConnection open(FlightOptions options) {
    return open(options, options.uri);
  }

  /** Connect to {@code uri} (an endpoint's location) with the options' credentials. */
  static FlightConnection open(FlightOptions options, String uri) {
    FlightConnection connection = new FlightConnection(options, uri);
    if (options.token == null && options.user != null) {
      try {
        CredentialCallOption bearer = connection.client
            .authenticateBasicToken(options.user, options.password)
            .orElseThrow(() -> new IcefloeFlightException("the server answered no bearer token for user " + options.user));
        options.token = connection.bearerOf(bearer);
      } catch (FlightRuntimeException e) {
        connection.close();
        throw IcefloeFlightException.from("cannot log in as " + options.user, e);
      }
    }
    return connection;
  }

  private String bearerOf(CredentialCallOption ignored) {
    // The handshake answered "Authorization: Bearer <token>" (seen by the capture middleware);
    // keep the token, so executors need no password.
    String value = bearerCapture.value;
    if (value == null || !value.startsWith("Bearer ")) {
      throw new IcefloeFlightException("the server's login answer carried no bearer token");
    }
    return value.substring("Bearer ".length());
  }

  /** Remembers the bearer token a Basic handshake answers in its response headers. */
  static final class BearerCapture implements org.apache.arrow.flight.FlightClientMiddleware.Factory {
    volatile String value;

    @Override
    public org.apache.arrow.flight.FlightClientMiddleware onCallStarted(org.apache.arrow.flight.CallInfo info) {
      return new org.apache.arrow.flight.FlightClientMiddleware() {
        @Override
        public void onBeforeSendingHeaders(org.apache.arrow.flight.CallHeaders outgoing) {}

        @Override
        public void onHeadersReceived(org.apache.arrow.flight.CallHeaders incoming) {
          String header = incoming.get("authorization");
          if (header != null && header.startsWith("Bearer ")) {
            value = header;
          }
        }

        @Override
        public void onCallCompleted(CallStatus status) {}
      };
    }
  }

  private static ByteArrayInputStream stream(String text) {
    return new ByteArrayInputStream(text.getBytes(StandardCharsets.UTF_8));
  }

  /** The call options: bearer token, {@code headers.*}, plus {@code extra} headers. */
  CallOption[] callOptions(Map<String, String> extra) {
    List<CallOption> out = new ArrayList<>();
    if (options.token != null) {
      out.add(new CredentialCallOption(new BearerCredentialWriter(options.token)));
    }
    FlightCallHeaders headers = new FlightCallHeaders();
    options.headers.forEach(headers::insert);
    extra.forEach(headers::insert);
    if (!headers.keys().isEmpty()) {
      out.add(new HeaderCallOption(headers));
    }
    return out.toArray(new CallOption[0]);
  }

  CallOption[] callOptions() {
    return callOptions(Map.of());
  }

  /** The planned endpoints of {@code query}; {@code extra} steers the server's split. */
  FlightInfo plan(String query, Map<String, String> extra) {
    try {
      return sql.execute(query, callOptions(extra));
    } catch (FlightRuntimeException e) {
      throw IcefloeFlightException.from("the server refused the scan", e);
    }
  }

  /** The result schema of {@code query} (nothing is planned or read). */
  Schema schema(String query) {
    try {
      return sql.getExecuteSchema(query, callOptions()).getSchema();
    } catch (FlightRuntimeException e) {
      throw IcefloeFlightException.from(null, e);
    }
  }

  /** The first value of the first column of a small query, or null when it answers no row. */
  Object firstValue(String query) {
    FlightInfo info = plan(query, Map.of());
    for (FlightEndpoint endpoint : info.getEndpoints()) {
      try (FlightStream stream = client.getStream(endpoint.getTicket(), callOptions())) {
        while (stream.next()) {
          VectorSchemaRoot root = stream.getRoot();
          if (root.getRowCount() > 0) {
            return root.getVector(0).getObject(0);
          }
        }
      } catch (FlightRuntimeException e) {
        throw IcefloeFlightException.from(null, e);
      } catch (Exception e) {
        throw new IcefloeFlightException("reading " + query + " failed: " + e.getMessage(), e);
      }
    }
    return null;
  }

  /** The text values of {@code columns} in every row of a small answer (metadata listings). */
  List<String[]> rows(FlightInfo info, String... columns) {
    List<String[]> out = new ArrayList<>();
    for (FlightEndpoint endpoint : info.getEndpoints()) {
      try (FlightStream stream = client.getStream(endpoint.getTicket(), callOptions())) {
        while (stream.next()) {
          VectorSchemaRoot root = stream.getRoot();
          for (int i = 0; i < root.getRowCount(); i++) {
            String[] row = new String[columns.length];
            for (int c = 0; c < columns.length; c++) {
              Object value = root.getVector(columns[c]).getObject(i);
              row[c] = value == null ? null : value.toString();
            }
            out.add(row);
          }
        }
      } catch (FlightRuntimeException e) {
        throw IcefloeFlightException.from(null, e);
      } catch (Exception e) {
        throw new IcefloeFlightException("reading a listing failed: " + e.getMessage(), e);
      }
    }
    return out;
  }

  /** Run one statement that answers no rows (DDL); a refusal keeps the server's status. */
  void update(String statement) {
    try {
      sql.executeUpdate(statement, callOptions());
    } catch (FlightRuntimeException e) {
      throw IcefloeFlightException.from(null, e);
    }
  }

  FlightStream stream(byte[] ticket) {
    return client.getStream(new Ticket(ticket), callOptions());
  }

  /** A DoAction with a JSON body; answers the first result's body as text ("" for none). */
  String action(String type, String jsonBody) {
    try {
      Iterator<Result> results = client.doAction(
          new Action(type, jsonBody.getBytes(StandardCharsets.UTF_8)), callOptions());
      String first = "";
      while (results.hasNext()) {
        byte[] body = results.next().getBody();
        if (first.isEmpty() && body != null) {
          first = new String(body, StandardCharsets.UTF_8);
        }
      }
      return first;
    } catch (FlightRuntimeException e) {
      throw IcefloeFlightException.from(type + " failed", e);
    }
  }

  static FlightDescriptor tablePath(String qualified) {
    return FlightDescriptor.path(Arrays.asList(SqlText.split(qualified)));
  }

  static boolean isNotFound(FlightRuntimeException e) {
    return e.status().code() == org.apache.arrow.flight.FlightStatusCode.NOT_FOUND;
  }

  static CallStatus status(FlightRuntimeException e) {
    return e.status();
  }

  @Override
  public void close() {
    try {
      client.close();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      try {
        allocator.close();
      } catch (IllegalStateException e) {
        // Buffers still held (a batch Spark kept past close): they are freed with their owner;
        // a leak report must not fail the task whose rows were all read.
        org.slf4j.LoggerFactory.getLogger(FlightConnection.class).warn("icefloe-flight: {}", e.getMessage());
      }
    }
  }
}
