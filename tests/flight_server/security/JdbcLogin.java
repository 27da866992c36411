// Connects with the Arrow Flight SQL JDBC driver (as DBeaver does) and reports the outcome.
// Usage: java -cp DRIVER.jar JdbcLogin.java URL [user password] [SQL]
// Prints CONNECTED or CONNECT_ERROR <message>, then QUERY_OK <rows> or QUERY_ERROR <message>.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Properties;

public class JdbcLogin {
    public static void main(String[] args) throws Exception {
        Class.forName("org.apache.arrow.driver.jdbc.ArrowFlightJdbcDriver");
        Properties props = new Properties();
        if (args.length >= 3) {
            props.setProperty("user", args[1]);
            props.setProperty("password", args[2]);
        }
        String sql = args.length >= 4 ? args[3] : "SELECT 1";
        Connection conn;
        try {
            conn = DriverManager.getConnection(args[0], props);
        } catch (Exception e) {
            System.out.println("CONNECT_ERROR " + oneLine(e));
            return;
        }
        System.out.println("CONNECTED");
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            int rows = 0;
            while (rs.next()) rows++;
            System.out.println("QUERY_OK " + rows);
        } catch (Exception e) {
            System.out.println("QUERY_ERROR " + oneLine(e));
        } finally {
            conn.close();
        }
    }

    private static String oneLine(Throwable e) {
        StringBuilder sb = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) sb.append(" | ").append(t.getMessage());
        return sb.toString().replace('\n', ' ');
    }
}
