import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/**
 * SQL writes through the stock Arrow Flight SQL JDBC driver (what DBeaver uses).
 * Usage: java -cp driver.jar:. JdbcWrites jdbc:arrow-flight-sql://127.0.0.1:PORT?useEncryption=false
 * Prints one "CHECK name value" line per observation; the Python test asserts on them.
 */
public class JdbcWrites {
    static void out(String name, Object value) {
        System.out.println("CHECK " + name + " " + value);
    }

    static String rows(Statement st, String sql) throws SQLException {
        List<String> values = new ArrayList<>();
        try (ResultSet rs = st.executeQuery(sql)) {
            int n = rs.getMetaData().getColumnCount();
            while (rs.next()) {
                StringBuilder sb = new StringBuilder();
                for (int i = 1; i <= n; i++) {
                    if (i > 1) sb.append(",");
                    sb.append(rs.getString(i));
                }
                values.add(sb.toString());
            }
        }
        return values.toString();
    }

    static String error(Statement st, String sql) {
        try {
            st.executeUpdate(sql);
            return "none";
        } catch (SQLException e) {
            StringBuilder sb = new StringBuilder();
            for (Throwable t = e; t != null; t = t.getCause()) {
                sb.append(t.getMessage()).append(" | ");
            }
            return sb.toString().replace('\n', ' ');
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0]); Statement st = conn.createStatement()) {
            out("create_schema", st.executeUpdate("CREATE SCHEMA jdbc"));
            out("create_table", st.executeUpdate(
                "CREATE TABLE jdbc.t (id BIGINT NOT NULL, name VARCHAR, amount DECIMAL(10, 2), day DATE)"));
            out("insert_values", st.executeUpdate(
                "INSERT INTO jdbc.t VALUES (1, 'ann', 1.50, DATE '2024-01-01'), (2, 'bob', 2.25, NULL)"));
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO jdbc.t (id, name) VALUES (?, ?)")) {
                ps.setLong(1, 3L);
                ps.setString(2, "cy");
                out("prepared_insert", ps.executeUpdate());
                ps.setLong(1, 4L);
                ps.setString(2, "dee");
                ps.addBatch();
                ps.setLong(1, 5L);
                ps.setString(2, "eve");
                ps.addBatch();
                int[] counts = ps.executeBatch();
                int total = 0;
                for (int c : counts) total += c;
                out("batch_insert", total);
            }
            out("insert_select", st.executeUpdate("INSERT INTO jdbc.t BY NAME SELECT id + 100 AS id FROM jdbc.t WHERE id <= 2"));
            out("update", st.executeUpdate("UPDATE jdbc.t SET amount = 9.99 WHERE id IN (1, 3)"));
            try (PreparedStatement ps = conn.prepareStatement("DELETE FROM jdbc.t WHERE id = ?")) {
                ps.setLong(1, 101L);
                out("prepared_delete", ps.executeUpdate());
            }
            out("delete", st.executeUpdate("DELETE FROM jdbc.t WHERE id >= 100"));
            out("rows", rows(st, "SELECT id, name, amount FROM jdbc.t ORDER BY id"));
            out("ctas", st.executeUpdate("CREATE TABLE jdbc.copy AS SELECT id, name FROM jdbc.t WHERE id < 3"));
            out("alter_add", st.executeUpdate("ALTER TABLE jdbc.copy ADD COLUMN note VARCHAR"));
            out("alter_rename_column", st.executeUpdate("ALTER TABLE jdbc.copy RENAME COLUMN name TO who"));
            out("alter_drop", st.executeUpdate("ALTER TABLE jdbc.copy DROP COLUMN note"));
            out("alter_rename", st.executeUpdate("ALTER TABLE jdbc.copy RENAME TO copy2"));
            out("alter_set", st.executeUpdate("ALTER TABLE jdbc.copy2 SET ('owner' = 'jdbc')"));
            out("copy_rows", rows(st, "SELECT * FROM jdbc.copy2 ORDER BY id"));
            out("truncate", st.executeUpdate("TRUNCATE jdbc.copy2"));
            out("copy_count", rows(st, "SELECT count(*) FROM jdbc.copy2"));
            out("drop_table", st.executeUpdate("DROP TABLE jdbc.copy2"));
            out("snapshot_ops", rows(st, "SELECT operation FROM jdbc.\"t$snapshots\" ORDER BY committed_at"));
            String first;
            try (ResultSet rs = st.executeQuery("SELECT snapshot_id FROM jdbc.\"t$snapshots\" ORDER BY committed_at LIMIT 1")) {
                rs.next();
                first = Long.toString(rs.getLong(1));
            }
            out("time_travel", rows(st, "SELECT id FROM jdbc.t AT (VERSION => " + first + ") ORDER BY id"));
            out("files", rows(st, "SELECT sum(record_count) FROM jdbc.\"t$files\""));
            out("history_len", rows(st, "SELECT count(*) FROM jdbc.\"t$history\""));
            out("err_not_null", error(st, "INSERT INTO jdbc.t (name) VALUES ('x')"));
            out("err_missing", error(st, "DELETE FROM jdbc.nope WHERE true"));
            out("err_exists", error(st, "CREATE TABLE jdbc.t (a INT)"));
            out("err_schema_not_empty", error(st, "DROP SCHEMA jdbc"));
            out("count_after_errors", rows(st, "SELECT count(*) FROM jdbc.t"));
            out("drop_cascade", st.executeUpdate("DROP SCHEMA jdbc CASCADE"));
        } catch (Exception e) {
            System.out.println("FAIL " + e);
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }
}
