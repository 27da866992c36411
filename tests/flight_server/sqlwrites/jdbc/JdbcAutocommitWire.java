import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * What the stock Arrow Flight SQL JDBC driver sends for setAutoCommit(false), commit() and
 * rollback(): each step is fenced by a marker query ("SELECT 'phase:NAME'") so the server-side
 * record of RPCs can be cut into steps.
 * Usage: java -cp driver.jar:. JdbcAutocommitWire jdbc:arrow-flight-sql://127.0.0.1:PORT?useEncryption=false
 */
public class JdbcAutocommitWire {
    static void mark(Statement st, String phase) throws SQLException {
        try (ResultSet rs = st.executeQuery("SELECT 'phase:" + phase + "'")) {
            rs.next();
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0]); Statement st = conn.createStatement()) {
            mark(st, "setautocommit");
            conn.setAutoCommit(false);
            mark(st, "insert");
            System.out.println("CHECK inserted " + st.executeUpdate("INSERT INTO jw.a VALUES (1)"));
            mark(st, "commit");
            conn.commit();
            mark(st, "insert2");
            st.executeUpdate("INSERT INTO jw.a VALUES (2)");
            mark(st, "rollback");
            conn.rollback();
            mark(st, "end");
        }
    }
}
