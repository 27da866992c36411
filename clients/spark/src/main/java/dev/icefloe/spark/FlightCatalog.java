package dev.icefloe.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.spark.sql.catalyst.analysis.NamespaceAlreadyExistsException;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.NonEmptyNamespaceException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code spark.sql.catalog.X = dev.icefloe.spark.FlightCatalog} (options {@code uri} and the
 * connection options of the format, as {@code spark.sql.catalog.X.uri} ...): the server's
 * namespaces and tables as a Spark catalog, entirely over Flight SQL. Listings are the Flight SQL
 * metadata calls (GetDbSchemas, GetTables); DDL is SQL sent to the server; tables read and
 * write as the format does (a pinned columnar scan, exactly-once staged writes). Spark never
 * touches the storage. A multi-level namespace {@code a.b} is the server's schema {@code "a.b"}.
 */
public class FlightCatalog implements TableCatalog, SupportsNamespaces {
  private static final Logger LOG = LoggerFactory.getLogger(FlightCatalog.class);
  static final String TABLE_TYPE = "TABLE";

  protected String name;
  /** The connection options; after a login they carry the bearer token, not the password. */
  private Map<String, String> raw;
  private FlightOptions options;

  @Override
  public void initialize(String catalogName, CaseInsensitiveStringMap catalogOptions) {
    initialize(catalogName, catalogOptions.asCaseSensitiveMap());
  }

  /** Connect with {@code given} (the connection options; table and query are dropped). */
  void initialize(String catalogName, Map<String, String> given) {
    name = catalogName;
    raw = new HashMap<>(given);
    raw.remove("table");
    raw.remove("query");
    options = FlightOptions.parse(raw);
    if (options.user != null) {
      try (FlightConnection ignored = FlightConnection.open(options)) {
        raw.put("token", options.token); // tables this catalog loads carry the token only
        raw.keySet().removeIf(k -> k.equalsIgnoreCase("password") || k.equalsIgnoreCase("passwordEnv")
            || k.equalsIgnoreCase("user"));
        options = FlightOptions.parse(raw);
      }
    }
  }

  @Override
  public String name() {
    return name;
  }

  static String qualified(Identifier ident) {
    if (ident.namespace().length == 0) {
      throw new IllegalArgumentException("table " + ident.name() + " needs a namespace (namespace.table)");
    }
    return String.join(".", ident.namespace()) + "." + ident.name();
  }

  private static String schemaName(String[] namespace) {
    return String.join(".", namespace);
  }

  // ---- namespaces -------------------------------------------------------------------------

  private List<String> schemas() {
    try (FlightConnection connection = FlightConnection.open(options)) {
      List<String> out = new ArrayList<>();
      for (String[] row : connection.rows(connection.sql.getSchemas(null, null, connection.callOptions()),
          "db_schema_name")) {
        out.add(row[0]);
      }
      return out;
    }
  }

  @Override
  public String[][] listNamespaces() {
    return children(new String[0]);
  }

  @Override
  public String[][] listNamespaces(String[] namespace) throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return children(namespace);
  }

  /** The direct children of {@code parent} among the server's (dot-joined) schema names. */
  private String[][] children(String[] parent) {
    String prefix = parent.length == 0 ? "" : schemaName(parent) + ".";
    Set<String> seen = new LinkedHashSet<>();
    for (String schema : schemas()) {
      if (schema.startsWith(prefix) && schema.length() > prefix.length()) {
        seen.add(schema.substring(prefix.length()).split("\\.", -1)[0]);
      }
    }
    String[][] out = new String[seen.size()][];
    int i = 0;
    for (String child : seen) {
      String[] full = java.util.Arrays.copyOf(parent, parent.length + 1);
      full[parent.length] = child;
      out[i++] = full;
    }
    return out;
  }

  @Override
  public boolean namespaceExists(String[] namespace) {
    return namespace.length > 0 && schemas().contains(schemaName(namespace));
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(String[] namespace) throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return new HashMap<>(); // the server keeps no namespace properties
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata) throws NamespaceAlreadyExistsException {
    try (FlightConnection connection = FlightConnection.open(options)) {
      connection.update("CREATE SCHEMA " + SqlText.identifier(schemaName(namespace)));
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.ALREADY_EXISTS) {
        throw new NamespaceAlreadyExistsException(namespace);
      }
      throw e;
    }
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw new UnsupportedOperationException("the server keeps no namespace properties to alter");
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade)
      throws NoSuchNamespaceException, NonEmptyNamespaceException {
    try (FlightConnection connection = FlightConnection.open(options)) {
      connection.update("DROP SCHEMA " + SqlText.identifier(schemaName(namespace)) + (cascade ? " CASCADE" : ""));
      return true;
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.NOT_FOUND) {
        throw new NoSuchNamespaceException(namespace);
      }
      if (e.getMessage().contains("is not empty")) {
        throw new NonEmptyNamespaceException(namespace);
      }
      throw e;
    }
  }

  // ---- tables -----------------------------------------------------------------------------

  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    String schema = schemaName(namespace);
    List<Identifier> out = new ArrayList<>();
    try (FlightConnection connection = FlightConnection.open(options)) {
      // The schema pattern is SQL LIKE: filter exactly here rather than escape it.
      for (String[] row : connection.rows(connection.sql.getTables(null, null, null, List.of(TABLE_TYPE), false,
          connection.callOptions()), "db_schema_name", "table_name")) {
        if (schema.equals(row[0])) {
          out.add(Identifier.of(namespace, row[1]));
        }
      }
    }
    return out.toArray(new Identifier[0]);
  }

  /** The format's options for one table of this catalog. */
  FlightOptions tableOptions(Identifier ident) {
    return tableOptions(ident, raw);
  }

  static FlightOptions tableOptions(Identifier ident, Map<String, String> connection) {
    Map<String, String> forTable = new HashMap<>(connection);
    forTable.put("table", qualified(ident));
    return FlightOptions.parseSource(forTable);
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    if (ident.namespace().length == 0) {
      throw new NoSuchTableException(ident);
    }
    FlightOptions forTable = tableOptions(ident);
    try {
      return IcefloeFlightSource.load(forTable);
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.NOT_FOUND) {
        throw new NoSuchTableException(ident);
      }
      throw e;
    }
  }

  @Override
  @SuppressWarnings("deprecation")
  public Table createTable(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    String table = qualified(ident);
    String create = SparkDdl.createTable(table, schema, partitions);
    String set = SparkDdl.setProperties(table, properties);
    try (FlightConnection connection = FlightConnection.open(options)) {
      connection.update(create);
      if (set != null) {
        try {
          connection.update(set);
        } catch (IcefloeFlightException e) {
          connection.update("DROP TABLE " + SqlText.table(table)); // all or nothing
          throw e;
        }
      }
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.ALREADY_EXISTS) {
        throw new TableAlreadyExistsException(ident);
      }
      if (e.code() == FlightStatusCode.NOT_FOUND && e.getMessage().contains("schema")) {
        throw new NoSuchNamespaceException(ident.namespace());
      }
      throw e;
    }
    LOG.info("icefloe-flight catalog {}: created {}", name, table);
    try {
      return loadTable(ident);
    } catch (NoSuchTableException e) {
      throw new IcefloeFlightException("table " + table + " was created but cannot be loaded", e);
    }
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    String table = qualified(ident);
    List<String> statements = SparkDdl.alterTable(table, changes);
    try (FlightConnection connection = FlightConnection.open(options)) {
      for (String statement : statements) {
        connection.update(statement);
      }
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.NOT_FOUND && e.getMessage().contains("table " + table)) {
        throw new NoSuchTableException(ident);
      }
      throw e;
    }
    return loadTable(ident);
  }

  @Override
  public boolean dropTable(Identifier ident) {
    if (ident.namespace().length == 0) {
      return false;
    }
    try (FlightConnection connection = FlightConnection.open(options)) {
      connection.update("DROP TABLE " + SqlText.table(qualified(ident)));
      return true;
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.NOT_FOUND) {
        return false;
      }
      throw e;
    }
  }

  /** Spark hands RENAME TO's new name as written: {@code ice.ns.t2} in catalog {@code ice} is
   * {@code ns.t2}. */
  private Identifier withoutCatalogName(Identifier ident) {
    String[] ns = ident.namespace();
    if (ns.length >= 2 && ns[0].equals(name)) {
      return Identifier.of(java.util.Arrays.copyOfRange(ns, 1, ns.length), ident.name());
    }
    return ident;
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent)
      throws NoSuchTableException, TableAlreadyExistsException {
    Identifier target = withoutCatalogName(newIdent);
    // Within a namespace the new name goes unqualified (the server's SQL parser takes no
    // qualified RENAME TO target); a move to another namespace names it in full.
    String newName = java.util.Arrays.equals(target.namespace(), oldIdent.namespace())
        ? SqlText.identifier(target.name()) : SqlText.table(qualified(target));
    try (FlightConnection connection = FlightConnection.open(options)) {
      connection.update("ALTER TABLE " + SqlText.table(qualified(oldIdent)) + " RENAME TO " + newName);
    } catch (IcefloeFlightException e) {
      if (e.code() == FlightStatusCode.ALREADY_EXISTS) {
        throw new TableAlreadyExistsException(newIdent);
      }
      if (e.code() == FlightStatusCode.NOT_FOUND) {
        throw new NoSuchTableException(oldIdent);
      }
      throw e;
    }
  }
}
