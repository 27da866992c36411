package dev.icefloe.spark;

import java.util.Map;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.SupportsCatalogOptions;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code spark.read.format("icefloe-flight")}: icefloe tables and SQL over Arrow Flight SQL,
 * read as columnar batches straight off the Flight stream. The short name differs from the
 * Python data source's ({@code "icefloe"}), so both can be registered in one session.
 */
public final class IcefloeFlightSource implements TableProvider, DataSourceRegister, SupportsCatalogOptions {
  public static final String SHORT_NAME = "icefloe-flight";
  private static final Logger LOG = LoggerFactory.getLogger(IcefloeFlightSource.class);

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  /** Spark reads and writes {@code format("icefloe-flight")} through a catalog of these options
   * (FormatCatalog): that is how its save modes create a missing table. */
  @Override
  public Identifier extractIdentifier(CaseInsensitiveStringMap options) {
    return FormatCatalog.identifier(options.asCaseSensitiveMap());
  }

  @Override
  public String extractCatalog(CaseInsensitiveStringMap options) {
    FlightOptions.parseSource(options.asCaseSensitiveMap()); // a precise error before any catalog
    return FormatCatalog.register(options.asCaseSensitiveMap());
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    FlightOptions parsed = FlightOptions.parseSource(options.asCaseSensitiveMap());
    try (FlightConnection connection = FlightConnection.open(parsed)) {
      return describe(connection, parsed).sparkSchema;
    }
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return load(FlightOptions.parseSource(properties));
  }

  /** The table (or query) of {@code parsed}, described and pinned now. */
  static FlightTable load(FlightOptions parsed) {
    try (FlightConnection connection = FlightConnection.open(parsed)) {
      Described described = describe(connection, parsed);
      Long snapshot = parsed.table == null ? null : pin(connection, parsed);
      LOG.debug("icefloe-flight: {} pinned to snapshot {}", parsed.table, snapshot);
      return new FlightTable(parsed, described.projections, described.sparkSchema, snapshot);
    }
  }

  /** What a source reads: its select items (table) and Spark schema. */
  static final class Described {
    final String[] projections;
    final StructType sparkSchema;

    Described(String[] projections, StructType sparkSchema) {
      this.projections = projections;
      this.sparkSchema = sparkSchema;
    }
  }

  static Described describe(FlightConnection connection, FlightOptions options) {
    if (options.query != null) {
      Schema schema = connection.schema(options.query);
      for (org.apache.arrow.vector.types.pojo.Field field : schema.getFields()) {
        if (!ArrowSparkTypes.isNative(field)) {
          throw new IcefloeFlightException("query column " + field.getName() + " has Arrow type "
              + field.getType() + ", which Spark cannot read as sent; CAST it in the query");
        }
      }
      return new Described(null, ArrowSparkTypes.sparkSchema(schema));
    }
    Schema tableSchema = connection.schema("SELECT * FROM " + SqlText.table(options.table));
    String[] projections = tableSchema.getFields().stream().map(ArrowSparkTypes::projection).toArray(String[]::new);
    Schema projected = connection.schema(
        "SELECT " + String.join(", ", projections) + " FROM " + SqlText.table(options.table));
    return new Described(projections, ArrowSparkTypes.sparkSchema(projected));
  }

  /** The snapshot reads of this DataFrame see: the option's, else the table's current one
   * (FlightTable.EMPTY for a table that has none yet). */
  static Long pin(FlightConnection connection, FlightOptions options) {
    if (options.snapshotId != null) {
      return options.snapshotId;
    }
    Object current = connection.firstValue("SELECT snapshot_id FROM "
        + SqlText.metadataTable(options.table, "history") + " ORDER BY made_current_at DESC LIMIT 1");
    return current == null ? FlightTable.EMPTY : ((Number) current).longValue();
  }
}
