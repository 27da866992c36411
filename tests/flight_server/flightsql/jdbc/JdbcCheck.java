import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/**
 * Drives icefloe through the stock Arrow Flight SQL JDBC driver (what DBeaver uses).
 * Usage: java -cp driver.jar:. JdbcCheck jdbc:arrow-flight-sql://127.0.0.1:PORT?useEncryption=false
 * Prints one "CHECK name value" line per observation; the Python test asserts on them.
 * Exits 1 with "FAIL ..." on any unexpected exception.
 */
public class JdbcCheck {
    static void out(String name, Object value) {
        System.out.println("CHECK " + name + " " + value);
    }

    static List<String> column(ResultSet rs, String name) throws SQLException {
        List<String> values = new ArrayList<>();
        while (rs.next()) {
            values.add(rs.getString(name));
        }
        rs.close();
        return values;
    }

    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0])) {
            DatabaseMetaData md = conn.getMetaData();
            out("product", md.getDatabaseProductName());
            out("catalogs", column(md.getCatalogs(), "TABLE_CAT"));
            out("schemas", column(md.getSchemas(), "TABLE_SCHEM"));
            out("schemas_sales", column(md.getSchemas("icefloe", "sal%"), "TABLE_SCHEM"));
            out("tables_sales", column(md.getTables(null, "sales", "%", null), "TABLE_NAME"));
            out("tables_typed", column(md.getTables(null, "sales", "ord%", new String[] {"TABLE"}), "TABLE_NAME"));
            out("columns_orders", column(md.getColumns(null, "sales", "orders", "%"), "COLUMN_NAME"));
            out("table_types", column(md.getTableTypes(), "TABLE_TYPE"));
            out("tables_multilevel", column(md.getTables("icefloe", "analytics.daily", null, null), "TABLE_NAME"));
            out("tables_all", column(md.getTables(null, null, null, null), "TABLE_NAME"));
            out("column_types", column(md.getColumns(null, "sales", "orders", null), "TYPE_NAME"));
            out("column_types_evolved", column(md.getColumns(null, "sales", "evolved", null), "COLUMN_NAME"));
            out("primary_keys", column(md.getPrimaryKeys(null, "sales", "orders"), "COLUMN_NAME"));
            out("imported_keys", column(md.getImportedKeys(null, "sales", "orders"), "FKCOLUMN_NAME"));

            try (Statement st = conn.createStatement()) {
                ResultSet rs = st.executeQuery("SELECT id, customer FROM sales.orders ORDER BY id");
                ResultSetMetaData rsmd = rs.getMetaData();
                out("query_columns", rsmd.getColumnCount() + ":" + rsmd.getColumnName(1) + "," + rsmd.getColumnName(2));
                for (int i = 1; i <= 2; i++) {
                    out("rsmd_" + i, rsmd.getCatalogName(i) + "|" + rsmd.getSchemaName(i) + "|" + rsmd.getTableName(i)
                        + "|" + rsmd.getColumnTypeName(i) + "|" + rsmd.isAutoIncrement(i) + "|" + rsmd.isReadOnly(i));
                }
                ResultSet joined = conn.createStatement().executeQuery(
                    "SELECT o.customer, count(*) AS n FROM sales.orders o GROUP BY o.customer");
                ResultSetMetaData jm = joined.getMetaData();
                out("rsmd_grouped", jm.getTableName(1) + "|" + jm.getSchemaName(1) + "|" + jm.getTableName(2) + "|"
                    + jm.getSchemaName(2));
                joined.close();
                out("query_customers", column(rs, "customer"));
                out("execute_is_query", st.execute("SELECT 42 AS answer"));
                ResultSet rs2 = st.getResultSet();
                rs2.next();
                out("answer", rs2.getLong(1));
                rs2.close();
            }

            try (PreparedStatement ps = conn.prepareStatement("SELECT customer FROM sales.orders WHERE id = ?")) {
                ps.setLong(1, 2);
                out("prepared_2", column(ps.executeQuery(), "customer"));
                ps.setLong(1, 3);
                out("prepared_3", column(ps.executeQuery(), "customer"));
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT id, ? || '!' AS s FROM sales.orders WHERE customer = ? AND amount > ?")) {
                ps.setString(1, "hi");
                ps.setString(2, "cy");
                ps.setDouble(3, 1.5);
                ResultSet rs = ps.executeQuery();
                rs.next();
                out("prepared_mixed", rs.getLong("id") + "," + rs.getString("s"));
                rs.close();
            }

            try (Statement st = conn.createStatement()) {
                st.executeUpdate("INSERT INTO sales.orders VALUES (9, 'x')");
                out("update_error", "none");
            } catch (SQLException e) {
                out("update_error", oneLine(e));
            }
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO sales.nosuch VALUES (?, 'x', 1.0)")) {
                ps.setString(1, "10");
                ps.executeUpdate();
                out("prepared_update_error", "none");
            } catch (SQLException e) {
                out("prepared_update_error", oneLine(e));
            }
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELEC nonsense");
                out("bad_sql_error", "none");
            } catch (SQLException e) {
                out("bad_sql_error", oneLine(e));
            }
            try (Statement st = conn.createStatement()) {
                ResultSet rs = st.executeQuery("SELECT count(*) AS n FROM sales.orders");
                rs.next();
                out("count_after_errors", rs.getLong(1));
                rs.close();
            }
        } catch (Exception e) {
            System.out.println("FAIL " + oneLine(e));
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    static String oneLine(Throwable e) {
        StringBuilder sb = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            sb.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage()).append(" | ");
        }
        return sb.toString().replace('\n', ' ');
    }
}
