package dev.icefloe.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collections;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * The connector's options, read once on the driver and shipped to executors as plain values.
 *
 * <p>Connection options match the Python source's ({@code uri}, {@code token} / {@code tokenEnv}
 * / {@code tokenFile}, {@code user} with {@code password} or {@code passwordEnv}, {@code
 * tls.rootCerts}, {@code tls.skipVerify}, {@code tls.certChain} + {@code tls.privateKey},
 * {@code headers.<name>}). A user/password pair is exchanged for a bearer token on the driver,
 * so executors carry only the token and never the password.
 */
public final class FlightOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  public static final long DEFAULT_TARGET_BYTES = 16L * 1024 * 1024;
  public static final int DEFAULT_MAX_PARTITIONS = 64;

  final String uri;
  final String table;
  final String query;
  final Long snapshotId;
  final String user;
  final transient String password;
  /** The bearer token (given, or obtained from user/password on the driver). Never printed. */
  String token;
  final String tlsRootCerts;
  final boolean tlsSkipVerify;
  final String tlsCertChain;
  final String tlsPrivateKey;
  final Map<String, String> headers;
  final Long targetPartitionBytes;
  final int maxPartitions;
  final Integer minPartitions;
  /** Rows per write batch when given (option writeBatchRows); null: sized from
   * writeBatchBytes and the schema ({@link WriteBatchSizing}). */
  final Integer writeBatchRows;
  /** A write batch ends when its Arrow data reaches this many bytes (option writeBatchBytes). */
  final long writeBatchBytes;
  /** Writes convert flat rows with {@link FlatArrowWriter} (option writeConverter "flat", the
   * default) or with Spark's ArrowWriter ("spark": the reference it is tested against). */
  final boolean flatWriteConverter;
  final boolean pushDownAggregate;
  final String startingOffsets;
  final Integer maxCommitsPerTrigger;
  /** A stream's change scan: null (appends, table columns only), "appends" or "all" (both
   * with the change columns _seq, _snapshot_id, _operation). */
  final String include;

  private FlightOptions(Map<String, String> raw) {
    Map<String, String> options = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    options.putAll(raw);
    uri = options.get("uri");
    if (uri == null || uri.isBlank()) {
      throw new IllegalArgumentException(
          "option uri is required, e.g. .option(\"uri\", \"grpc://127.0.0.1:31337\")");
    }
    if (!(uri.startsWith("grpc://") || uri.startsWith("grpc+tcp://") || uri.startsWith("grpc+tls://"))) {
      throw new IllegalArgumentException(
          "option uri must be grpc://HOST:PORT or grpc+tls://HOST:PORT, got '" + cut(uri) + "'");
    }
    table = options.get("table");
    query = options.get("query");
    snapshotId = longOption(options, "snapshotId", null, Long.MIN_VALUE);
    if (query != null && snapshotId != null) {
      throw new IllegalArgumentException("option snapshotId goes with table, not query");
    }
    if (table != null) {
      SqlText.table(table); // a precise error now rather than at the first read
    }
    user = options.get("user");
    String pass = options.get("password");
    String passEnv = options.get("passwordEnv");
    if (pass == null && passEnv != null) {
      pass = System.getenv(passEnv);
      if (pass == null) {
        throw new IllegalArgumentException(
            "option passwordEnv: environment variable " + passEnv + " is not set where the Spark driver runs");
      }
    }
    if (user != null && pass == null) {
      throw new IllegalArgumentException("option user needs password or passwordEnv");
    }
    password = pass;
    String tok = options.get("token");
    if (tok == null && options.get("tokenEnv") != null) {
      tok = System.getenv(options.get("tokenEnv"));
      if (tok == null) {
        throw new IllegalArgumentException(
            "option tokenEnv: environment variable " + options.get("tokenEnv") + " is not set where the Spark driver runs");
      }
    }
    if (tok == null && options.get("tokenFile") != null) {
      tok = readText(options.get("tokenFile"), "tokenFile").strip();
    }
    token = tok;
    tlsRootCerts = options.get("tls.rootCerts");
    tlsSkipVerify = boolOption(options, "tls.skipVerify", false);
    tlsCertChain = options.get("tls.certChain");
    tlsPrivateKey = options.get("tls.privateKey");
    if ((tlsCertChain == null) != (tlsPrivateKey == null)) {
      throw new IllegalArgumentException("mutual TLS needs both tls.certChain and tls.privateKey");
    }
    Map<String, String> extra = new TreeMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getKey().toLowerCase(Locale.ROOT).startsWith("headers.")) {
        extra.put(e.getKey().substring("headers.".length()).toLowerCase(Locale.ROOT), e.getValue());
      }
    }
    headers = Collections.unmodifiableMap(extra);
    targetPartitionBytes = longOption(options, "targetPartitionBytes", null, 1);
    maxPartitions = longOption(options, "maxPartitions", (long) DEFAULT_MAX_PARTITIONS, 1).intValue();
    Long min = longOption(options, "minPartitions", null, 1);
    minPartitions = min == null ? null : min.intValue();
    Long batchRows = longOption(options, "writeBatchRows", null, 1);
    if (batchRows != null && batchRows > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("option writeBatchRows must be <= " + Integer.MAX_VALUE + ", got " + batchRows);
    }
    writeBatchRows = batchRows == null ? null : batchRows.intValue();
    writeBatchBytes = longOption(options, "writeBatchBytes", WriteBatchSizing.DEFAULT_BATCH_BYTES, 1024);
    String converter = options.getOrDefault("writeConverter", "flat").strip().toLowerCase(Locale.ROOT);
    if (!converter.equals("flat") && !converter.equals("spark")) {
      throw new IllegalArgumentException("option writeConverter must be flat or spark, got '" + cut(converter) + "'");
    }
    flatWriteConverter = converter.equals("flat");
    pushDownAggregate = boolOption(options, "pushDownAggregate", true);
    startingOffsets = options.getOrDefault("startingOffsets", "latest").strip();
    if (!startingOffsets.equalsIgnoreCase("latest") && !startingOffsets.equalsIgnoreCase("earliest")
        && !startingOffsets.matches("[0-9]+")) {
      throw new IllegalArgumentException(
          "option startingOffsets must be earliest, latest or a commit seq, got '" + cut(startingOffsets) + "'");
    }
    Long most = longOption(options, "maxCommitsPerTrigger", null, 1);
    maxCommitsPerTrigger = most == null ? null : most.intValue();
    String inc = options.get("include");
    if (inc != null) {
      inc = inc.strip().toLowerCase(Locale.ROOT);
      if (!inc.equals("appends") && !inc.equals("all")) {
        throw new IllegalArgumentException("option include must be appends or all, got '" + cut(inc) + "'");
      }
    }
    include = inc;
  }

  /** Parse and check the options; throws IllegalArgumentException naming the bad option. */
  public static FlightOptions parse(Map<String, String> raw) {
    return new FlightOptions(raw);
  }

  /** Options for a read or write of a source: exactly one of table and query. */
  public static FlightOptions parseSource(Map<String, String> raw) {
    FlightOptions options = parse(raw);
    if ((options.table == null) == (options.query == null)) {
      throw new IllegalArgumentException(
          "give exactly one of the options table (\"ns.t\") and query (SQL)");
    }
    return options;
  }

  static String readText(String path, String what) {
    try {
      return Files.readString(Path.of(path), StandardCharsets.UTF_8);
    } catch (java.io.IOException e) {
      throw new IllegalArgumentException("option " + what + ": cannot read the file " + path);
    }
  }

  private static Long longOption(Map<String, String> options, String name, Long dflt, long minimum) {
    String raw = options.get(name);
    if (raw == null) {
      return dflt;
    }
    long value;
    try {
      value = Long.parseLong(raw.strip());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("option " + name + " must be a whole number, got '" + cut(raw) + "'");
    }
    if (value < minimum) {
      throw new IllegalArgumentException("option " + name + " must be >= " + minimum + ", got " + value);
    }
    return value;
  }

  private static boolean boolOption(Map<String, String> options, String name, boolean dflt) {
    String raw = options.get(name);
    if (raw == null) {
      return dflt;
    }
    switch (raw.strip().toLowerCase(Locale.ROOT)) {
      case "true": case "1": case "yes":
        return true;
      case "false": case "0": case "no":
        return false;
      default:
        throw new IllegalArgumentException("option " + name + " must be true or false, got '" + cut(raw) + "'");
    }
  }

  static String cut(String text) {
    return text.length() > 80 ? text.substring(0, 80) + "..." : text;
  }
}
