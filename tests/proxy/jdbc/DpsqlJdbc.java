import java.sql.*;

/** A JDBC client for tests/proxy/test_jdbc.py: args URL USER PASSWORD [catalog | queries SQL...]. */
public class DpsqlJdbc {
    public static void main(String[] args) throws Exception {
        if (args.length > 3 && args[3].equals("queries")) {
            queries(args);
            return;
        }
        try (Connection con = DriverManager.getConnection(args[0], args[1], args[2])) {
            try (Statement st = con.createStatement();
                 ResultSet rs = st.executeQuery("SELECT COUNT(*) AS n FROM people")) {
                while (rs.next()) System.out.println("statement count " + rs.getDouble("n"));
            }
            try (PreparedStatement ps = con.prepareStatement(
                    "SELECT state, COUNT(*) AS n FROM people WHERE age > ? GROUP BY state ORDER BY state")) {
                for (int round = 0; round < 6; round++) {     // past prepareThreshold: a named server statement
                    ps.setInt(1, 30);
                    int rows = 0;
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) {
                            rows++;
                            if (round == 0) System.out.println("prepared " + rs.getString("state") + " " + rs.getDouble("n"));
                        }
                    }
                    System.out.println("round " + round + " rows " + rows);
                }
            }
            try (Statement st = con.createStatement()) {
                st.executeQuery("SELECT * FROM people");
            } catch (SQLException e) {
                System.out.println("error " + e.getSQLState());
            }
            try (Statement st = con.createStatement(); ResultSet rs = st.executeQuery("SHOW dpsql.budget")) {
                while (rs.next()) System.out.println("budget " + rs.getString("analyst") + " " + rs.getDouble("epsilon_spent"));
            }
            if (args.length > 3 && args[3].equals("catalog")) {
                DatabaseMetaData md = con.getMetaData();
                try (ResultSet rs = md.getTables(null, null, "%", new String[] {"TABLE"})) {
                    while (rs.next()) System.out.println("table " + rs.getString("TABLE_NAME"));
                }
                try (ResultSet rs = md.getColumns(null, null, "people", "%")) {
                    while (rs.next()) System.out.println("column " + rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME"));
                }
            }
        }
        System.out.println("done");
    }

    /** Each SQL argument through a PreparedStatement: "ok ROWS COLUMNS" or "error SQLSTATE". */
    static void queries(String[] args) throws Exception {
        try (Connection con = DriverManager.getConnection(args[0], args[1], args[2])) {
            for (int i = 4; i < args.length; i++) {
                try (PreparedStatement ps = con.prepareStatement(args[i]); ResultSet rs = ps.executeQuery()) {
                    ResultSetMetaData md = rs.getMetaData();
                    StringBuilder cols = new StringBuilder();
                    for (int c = 1; c <= md.getColumnCount(); c++) cols.append(c > 1 ? "," : "").append(md.getColumnLabel(c));
                    int rows = 0;
                    while (rs.next()) rows++;
                    System.out.println("ok " + rows + " " + cols);
                } catch (SQLException e) {
                    System.out.println("error " + e.getSQLState());
                }
            }
        }
        System.out.println("done");
    }
}
