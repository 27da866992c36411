import java.util.Map;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.rest.RESTCatalog;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.view.View;

/**
 * Iceberg-Java's own RESTCatalog against icefloe: error wording and types it matches on, and
 * views (create, load, replace, rename, list, exists, drop). Prints key=value lines the pytest
 * side checks. Arguments: REST uri, warehouse.
 */
public class IcebergRestViews {
  static void out(String key, Object value) {
    System.out.println(key + "=" + String.valueOf(value).replace('\n', ' '));
  }

  public static void main(String[] args) throws Exception {
    RESTCatalog catalog = new RESTCatalog();
    catalog.initialize("ice", Map.of("uri", args[0], "warehouse", args[1]));
    Namespace ns = Namespace.of("jv");
    catalog.createNamespace(ns);
    try {
      catalog.createNamespace(ns);
    } catch (RuntimeException e) {
      out("namespace_exists", e.getClass().getSimpleName() + ": " + e.getMessage());
    }
    Schema schema = new Schema(Types.NestedField.optional(1, "id", Types.LongType.get()));
    TableIdentifier tid = TableIdentifier.of(ns, "t");
    catalog.createTable(tid, schema);
    try {
      catalog.createTable(tid, schema);
    } catch (RuntimeException e) {
      out("table_exists", e.getClass().getSimpleName() + ": " + e.getMessage());
    }
    Table first = catalog.loadTable(tid);
    Table second = catalog.loadTable(tid);
    first.updateSchema().addColumn("a", Types.LongType.get()).commit();
    try {
      second.updateSchema().addColumn("b", Types.LongType.get()).commit();
      out("stale_schema", "committed");
    } catch (RuntimeException e) {
      out("stale_schema", e.getClass().getSimpleName() + ": " + e.getMessage());
    }
    TableIdentifier vid = TableIdentifier.of(ns, "v");
    View view = catalog.buildView(vid).withSchema(schema).withDefaultNamespace(ns)
        .withQuery("spark", "SELECT id FROM jv.t").create();
    out("view_created", view.currentVersion().versionId());
    out("view_exists", catalog.viewExists(vid));
    out("views", catalog.listViews(ns));
    View replaced = catalog.buildView(vid).withSchema(schema).withDefaultNamespace(ns)
        .withQuery("spark", "SELECT id FROM jv.t WHERE id > 1").replace();
    out("view_replaced", replaced.currentVersion().versionId() + " "
        + replaced.sqlFor("spark").sql());
    TableIdentifier renamed = TableIdentifier.of(ns, "w");
    catalog.renameView(vid, renamed);
    out("view_renamed", catalog.viewExists(vid) + " " + catalog.viewExists(renamed));
    out("loaded_sql", catalog.loadView(renamed).sqlFor("spark").sql());
    try {
      catalog.buildView(renamed).withSchema(schema).withDefaultNamespace(ns)
          .withQuery("spark", "SELECT 1").create();
    } catch (RuntimeException e) {
      out("view_exists_error", e.getClass().getSimpleName() + ": " + e.getMessage());
    }
    out("view_dropped", catalog.dropView(renamed) + " " + catalog.viewExists(renamed));
    try {
      catalog.loadView(renamed);
    } catch (RuntimeException e) {
      out("missing_view", e.getClass().getSimpleName() + ": " + e.getMessage());
    }
    catalog.close();
  }
}
