package dev.icefloe.spark;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The catalog behind {@code format("icefloe-flight")}: Spark runs a DataFrame's save modes
 * (errorifexists, ignore: create the table from the DataFrame, as CREATE TABLE AS SELECT) only
 * through a catalog, so the format names one per distinct set of options. The options stay in
 * this JVM (a registry keyed by the catalog's name); the session's conf holds only the catalog's
 * class, never a password or token.
 *
 * <p>Unlike {@link FlightCatalog}, loading a missing table answers a table that is created from
 * the rows of the first write to it (append and overwrite create a missing table too) and whose
 * reads fail with NOT_FOUND.
 */
public final class FormatCatalog extends FlightCatalog {
  static final String PREFIX = "icefloe_flight_";
  private static final Map<String, Map<String, String>> REGISTERED = new ConcurrentHashMap<>();

  private Map<String, String> given;

  /** The name of the catalog for {@code options} (registered in the active session if new). */
  static String register(Map<String, String> options) {
    Map<String, String> sorted = new TreeMap<>(options);
    String name = PREFIX + digest(sorted.toString());
    REGISTERED.putIfAbsent(name, sorted);
    SparkSession session = SparkSession.active();
    String key = "spark.sql.catalog." + name;
    if (!session.conf().contains(key)) {
      session.conf().set(key, FormatCatalog.class.getName());
    }
    return name;
  }

  private static String digest(String text) {
    try {
      byte[] hash = MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
      StringBuilder out = new StringBuilder();
      for (int i = 0; i < 10; i++) {
        out.append(String.format("%02x", hash[i]));
      }
      return out.toString();
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  /** The identifier Spark asks this catalog for: the table option's, or a fixed one for query. */
  static Identifier identifier(Map<String, String> options) {
    FlightOptions parsed = FlightOptions.parseSource(options);
    if (parsed.table == null) {
      return Identifier.of(new String[] {"query"}, "query");
    }
    String[] parts = SqlText.split(parsed.table);
    return Identifier.of(parts[0].split("\\.", -1), parts[1]);
  }

  @Override
  public void initialize(String catalogName, CaseInsensitiveStringMap ignored) {
    given = REGISTERED.get(catalogName);
    if (given == null) {
      throw new IllegalStateException("icefloe-flight: catalog " + catalogName
          + " is made by format(\"icefloe-flight\") and has no options in this JVM");
    }
    initialize(catalogName, given);
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    FlightOptions parsed = FlightOptions.parseSource(given);
    if (parsed.query != null) {
      return IcefloeFlightSource.load(parsed);
    }
    try {
      return IcefloeFlightSource.load(parsed);
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.NOT_FOUND) {
        return new MissingTable(parsed, e.getMessage());
      }
      throw e;
    }
  }

  @Override
  public boolean tableExists(Identifier ident) {
    return !(loadTableQuietly(ident) instanceof MissingTable);
  }

  private Table loadTableQuietly(Identifier ident) {
    try {
      return loadTable(ident);
    } catch (NoSuchTableException e) {
      return new MissingTable(FlightOptions.parseSource(given), e.getMessage());
    }
  }

  /** The options of a table created by a save mode: the format's options, as given. */
  @Override
  FlightOptions tableOptions(Identifier ident) {
    return FlightOptions.parseSource(new HashMap<>(given));
  }
}
