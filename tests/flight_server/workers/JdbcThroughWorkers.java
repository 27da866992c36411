import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;

/** Reads through the Arrow Flight SQL JDBC driver from a server with read workers: args url. */
public class JdbcThroughWorkers {
    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0])) {
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("SELECT count(*) AS jdbc_marker FROM wk.t")) {
                rs.next();
                System.out.println("count=" + rs.getLong(1));
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT label AS jdbc_prepared_marker FROM wk.t WHERE id = ?")) {
                ps.setLong(1, 12L);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    System.out.println("label=" + rs.getString(1));
                }
            }
        }
    }
}
