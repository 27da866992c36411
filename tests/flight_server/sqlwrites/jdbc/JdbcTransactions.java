import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * Transactions through the stock Arrow Flight SQL JDBC driver: setAutoCommit(false), commit,
 * rollback, with a second connection observing what is visible.
 * Usage: java -cp driver.jar:. JdbcTransactions jdbc:arrow-flight-sql://127.0.0.1:PORT?useEncryption=false
 * Prints one "CHECK name value" line per observation; the Python test asserts on them.
 */
public class JdbcTransactions {
    static void out(String name, Object value) {
        System.out.println("CHECK " + name + " " + value);
    }

    static String counts(Statement st) throws SQLException {
        StringBuilder sb = new StringBuilder();
        for (String t : new String[] {"jt.a", "jt.b"}) {
            try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + t)) {
                rs.next();
                sb.append(sb.length() > 0 ? "," : "").append(rs.getLong(1));
            }
        }
        return sb.toString();
    }

    static String message(SQLException e) {
        StringBuilder sb = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            sb.append(t.getMessage()).append(" | ");
        }
        return sb.toString().replace('\n', ' ');
    }

    public static void main(String[] args) throws Exception {
        try (Connection observer = DriverManager.getConnection(args[0]);
             Statement obs = observer.createStatement();
             Connection conn = DriverManager.getConnection(args[0])) {
            obs.executeUpdate("CREATE SCHEMA jt");
            obs.executeUpdate("CREATE TABLE jt.a (id BIGINT)");
            obs.executeUpdate("CREATE TABLE jt.b (id BIGINT)");
            out("supports", conn.getMetaData().supportsTransactions());
            try {
                conn.setAutoCommit(false);
                out("autocommit", conn.getAutoCommit());
                try (Statement st = conn.createStatement()) {
                    out("insert_a", st.executeUpdate("INSERT INTO jt.a VALUES (1), (2)"));
                    out("insert_b", st.executeUpdate("INSERT INTO jt.b VALUES (1)"));
                    out("during", counts(obs));
                    conn.commit();
                    out("after_commit", counts(obs));
                    out("insert_a2", st.executeUpdate("INSERT INTO jt.a VALUES (3)"));
                    out("insert_b2", st.executeUpdate("INSERT INTO jt.b VALUES (3)"));
                    conn.rollback();
                    out("after_rollback", counts(obs));
                }
            } catch (SQLException e) {
                out("error", message(e));
            }
            // The same through SQL statements (kept in the connection's session, by its cookie).
            try (Connection sql = DriverManager.getConnection(args[0]); Statement st = sql.createStatement()) {
                st.execute("BEGIN");
                out("sql_insert_a", st.executeUpdate("INSERT INTO jt.a VALUES (10)"));
                out("sql_insert_b", st.executeUpdate("INSERT INTO jt.b VALUES (10)"));
                out("sql_during", counts(obs));
                st.execute("COMMIT");
                out("sql_after_commit", counts(obs));
                st.execute("BEGIN");
                st.executeUpdate("INSERT INTO jt.a VALUES (11)");
                st.executeUpdate("INSERT INTO jt.b VALUES (11)");
                st.execute("ROLLBACK");
                out("sql_after_rollback", counts(obs));
            } catch (SQLException e) {
                out("sql_error", message(e));
            }
        }
    }
}
