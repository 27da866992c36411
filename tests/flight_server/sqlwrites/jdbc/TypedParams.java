import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.ParameterMetaData;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Time;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;

/**
 * Prepared INSERT / UPDATE / DELETE with typed setters through the stock Flight SQL JDBC driver
 * (what DBeaver does when a cell is edited). Usage: java TypedParams JDBC_URL
 * Prints one "CHECK name value" line per observation; the Python test asserts on them.
 */
public class TypedParams {
    static void out(String name, Object value) {
        System.out.println("CHECK " + name + " " + String.valueOf(value).replace('\n', ' '));
    }

    static String error(Exception e) {
        StringBuilder sb = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) sb.append(t.getMessage()).append(" | ");
        return sb.toString();
    }

    interface Step { Object run() throws Exception; }

    static void check(String name, Step step) {
        try {
            out(name, step.run());
        } catch (Exception e) {
            out(name, "ERROR " + error(e));
        }
    }

    static String rows(Statement st, String sql) throws SQLException {
        List<String> values = new ArrayList<>();
        try (ResultSet rs = st.executeQuery(sql)) {
            int n = rs.getMetaData().getColumnCount();
            while (rs.next()) {
                StringBuilder sb = new StringBuilder();
                for (int i = 1; i <= n; i++) {
                    if (i > 1) sb.append(",");
                    Object v = rs.getObject(i);
                    sb.append(v instanceof byte[] ? "0x" + hex((byte[]) v) : String.valueOf(v));
                }
                values.add(sb.toString());
            }
        }
        return values.toString();
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }

    static String paramTypes(PreparedStatement ps) throws SQLException {
        ParameterMetaData md = ps.getParameterMetaData();
        List<String> types = new ArrayList<>();
        for (int i = 1; i <= md.getParameterCount(); i++) types.add(md.getParameterTypeName(i));
        return types.toString();
    }

    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0]); Statement st = conn.createStatement()) {
            st.executeUpdate("CREATE SCHEMA tp");
            st.executeUpdate("CREATE TABLE tp.t (id INTEGER NOT NULL, big BIGINT, dbl DOUBLE, amount DECIMAL(12, 3), "
                + "ts TIMESTAMP, day DATE, txt VARCHAR, flag BOOLEAN, raw BLOB, u UUID, tm TIME)");
            String insert = "INSERT INTO tp.t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
            try (PreparedStatement ps = conn.prepareStatement(insert)) {
                out("insert_param_types", paramTypes(ps));
                check("insert_typed", () -> {
                    ps.setInt(1, 1);
                    ps.setLong(2, 9000000000L);
                    ps.setDouble(3, 2.5);
                    ps.setBigDecimal(4, new BigDecimal("1234.567"));
                    ps.setTimestamp(5, Timestamp.valueOf("2024-03-04 05:06:07.123456"));
                    ps.setDate(6, Date.valueOf("2024-03-04"));
                    ps.setString(7, "ann");
                    ps.setBoolean(8, true);
                    ps.setBytes(9, new byte[] {1, 2, (byte) 0xff});
                    ps.setString(10, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
                    ps.setTime(11, Time.valueOf("01:02:03"));
                    return ps.executeUpdate();
                });
                check("insert_nulls", () -> {
                    ps.setInt(1, 2);
                    for (int i = 2; i <= 11; i++) ps.setNull(i, Types.NULL);
                    return ps.executeUpdate();
                });
                check("insert_batch", () -> {
                    for (int id = 3; id <= 4; id++) {
                        ps.setInt(1, id);
                        ps.setLong(2, id * 10L);
                        ps.setDouble(3, id / 2.0);
                        ps.setBigDecimal(4, BigDecimal.valueOf(id).setScale(3));
                        ps.setTimestamp(5, Timestamp.valueOf("2024-01-01 00:00:00"));
                        ps.setDate(6, Date.valueOf("2024-01-0" + id));
                        ps.setString(7, "r" + id);
                        ps.setBoolean(8, id % 2 == 0);
                        ps.setBytes(9, new byte[] {(byte) id});
                        ps.setNull(10, Types.VARCHAR);
                        ps.setNull(11, Types.TIME);
                        ps.addBatch();
                    }
                    int total = 0;
                    for (int c : ps.executeBatch()) total += c;
                    return total;
                });
            }
            try (PreparedStatement ps = conn.prepareStatement("UPDATE tp.t SET txt = ? WHERE id = ?")) {
                out("update_param_types", paramTypes(ps));
                check("update_typed", () -> {
                    ps.setString(1, "edited");
                    ps.setInt(2, 1);
                    return ps.executeUpdate();
                });
            }
            try (PreparedStatement ps = conn.prepareStatement("UPDATE tp.t SET amount = ?, big = big + ? WHERE id + ? > 3")) {
                out("update_expr_param_types", paramTypes(ps));
                check("update_expr", () -> {
                    // The driver wants the column's scale (DecimalVector refuses another one).
                    ps.setBigDecimal(1, new BigDecimal("7.500"));
                    ps.setLong(2, 1L);
                    ps.setInt(3, 0);
                    return ps.executeUpdate();
                });
            }
            try (PreparedStatement ps = conn.prepareStatement("DELETE FROM tp.t WHERE big = ? OR flag = ?")) {
                out("delete_param_types", paramTypes(ps));
                check("delete_typed", () -> {
                    ps.setLong(1, 30L);
                    ps.setBoolean(2, false);
                    return ps.executeUpdate();
                });
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "INSERT INTO tp.t (id, txt) SELECT id + ?, txt FROM tp.t WHERE id = ? LIMIT ?")) {
                out("insert_select_param_types", paramTypes(ps));
                check("insert_select", () -> {
                    ps.setInt(1, 100);
                    ps.setInt(2, 1);
                    ps.setLong(3, 1L);
                    return ps.executeUpdate();
                });
            }
            check("rows", () -> rows(st, "SELECT id, big, dbl, amount, ts, day, txt, flag, raw, u, tm FROM tp.t ORDER BY id"));
            try (ResultSet rs = st.executeQuery("SELECT id, big, dbl, amount, ts, day, txt, flag, raw, u FROM tp.t")) {
                ResultSetMetaData md = rs.getMetaData();
                List<String> types = new ArrayList<>();
                for (int i = 1; i <= md.getColumnCount(); i++) types.add(md.getColumnName(i) + ":" + md.getColumnType(i));
                out("result_types", types);
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT id FROM tp.t WHERE ts = ? AND tm = ?")) {
                out("select_param_types", paramTypes(ps));
                check("select_timestamp", () -> {
                    ps.setTimestamp(1, Timestamp.valueOf("2024-03-04 05:06:07.123"));
                    ps.setTime(2, Time.valueOf("01:02:03"));
                    List<String> ids = new ArrayList<>();
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) ids.add(rs.getString(1));
                    }
                    return ids;
                });
            }
            DatabaseMetaData meta = conn.getMetaData();
            check("type_info", () -> {
                List<String> names = new ArrayList<>();
                try (ResultSet rs = meta.getTypeInfo()) {
                    while (rs.next()) names.add(rs.getString("TYPE_NAME") + ":" + rs.getInt("DATA_TYPE"));
                }
                return names;
            });
            st.executeUpdate("DROP SCHEMA tp CASCADE");
        } catch (Exception e) {
            System.out.println("FAIL " + error(e));
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }
}
