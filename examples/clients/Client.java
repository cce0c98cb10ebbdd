// examples/clients/Client.java: the JDBC client of the clients example
// (README.md), run as one source file:
//     java -cp /usr/share/java/postgresql.jar Client.java
// The same steps as client_psycopg2.py: peeks once; proves on a bucket of
// its own that sleeping retry_after_seconds is enough; then, with the other
// clients, loops on tb_try on the shared bucket for EXAMPLE_SECONDS,
// sleeping retry_after_seconds after each denial and waiting in the server
// (tb_acquire_wait) every tenth call.  Prints one JSON line.  JDBC reads no
// PG* variables and speaks TCP only: the URL is built from PGHOST (a host
// name, not a socket folder), PGPORT, PGUSER and PGDATABASE.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

public class Client {
    static final String NAME = "jdbc";
    static final String BUCKET = env("EXAMPLE_BUCKET", "shared");
    static final double SECONDS = Double.parseDouble(env("EXAMPLE_SECONDS", "5"));
    static final double COST = Double.parseDouble(env("EXAMPLE_COST", "1"));
    static final double RATE = Double.parseDouble(env("EXAMPLE_RATE", "10")); // to judge retry_after
    static final long BARRIER = Long.parseLong(env("EXAMPLE_BARRIER", "0"));  // advisory lock key; 0: none
    static final int SOLO_ROUNDS = 5;
    static final double WAIT_TIMEOUT = 1.0; // seconds

    static String env(String name, String fallback) {
        String value = System.getenv(name);
        return value == null || value.isEmpty() ? fallback : value;
    }

    final Map<String, Object> r = new LinkedHashMap<>();
    PreparedStatement tryStmt;

    // tb_try once; on a denial, judge retry_after_seconds and sleep it.
    // Returns {granted (1 or 0), when the server answered in epoch seconds}.
    double[] tryOnce(String bucket) throws SQLException, InterruptedException {
        tryStmt.setString(1, bucket);
        tryStmt.setDouble(2, COST);
        try (ResultSet rs = tryStmt.executeQuery()) {
            rs.next();
            boolean granted = rs.getBoolean("granted");
            double at = rs.getDouble("at");
            if (!granted) {
                // a float8 column read with getDouble; getString("retry_after")
                // would give "00:00:00.042", getObject a PGInterval
                double wait = rs.getDouble("retry_after_seconds");
                boolean usable = wait > 0 && wait <= COST / RATE + 0.001;
                r.put("retry_after_usable", (Boolean) r.get("retry_after_usable") && usable);
                r.put("retry_after_min", r.get("retry_after_min") == null ? wait
                        : Math.min(wait, (Double) r.get("retry_after_min")));
                r.put("retry_after_max", r.get("retry_after_max") == null ? wait
                        : Math.max(wait, (Double) r.get("retry_after_max")));
                // Thread.sleep counts whole milliseconds: round up, or the retry comes early
                Thread.sleep((long) Math.ceil(wait * 1000));
            }
            return new double[] {granted ? 1 : 0, at};
        }
    }

    void add(String key, int n) {
        r.put(key, (Integer) r.get(key) + n);
    }

    void run() throws SQLException, InterruptedException {
        Properties props = new Properties();
        props.setProperty("user", env("PGUSER", "postgres"));
        String url = "jdbc:postgresql://" + env("PGHOST", "127.0.0.1") + ":" + env("PGPORT", "5432")
                + "/" + env("PGDATABASE", env("PGUSER", "postgres"));
        r.put("client", NAME);
        for (String key : new String[] {"grants", "denials", "retried", "retried_granted",
                "waits", "waits_granted"}) {
            r.put(key, 0);
        }
        r.put("first_call", null);
        r.put("last_grant", null);
        r.put("retry_after_min", null);
        r.put("retry_after_max", null);
        r.put("retry_after_usable", true);
        r.put("solo_retried", 0);
        r.put("solo_retried_granted", 0);
        try (Connection db = DriverManager.getConnection(url, props)) {  // autocommit by default
            tryStmt = db.prepareStatement("SELECT t.granted, t.retry_after_seconds,"
                    + " extract(epoch FROM clock_timestamp())::float8 AS at"  // after the decision
                    + " FROM tb_try(?, ?) AS t");
            // setString(3, "1 second") would send a varchar, and no
            // tb_acquire_wait(varchar, float8, varchar) exists (42883): pass
            // seconds as a double to make_interval
            PreparedStatement waitStmt = db.prepareStatement(
                    "SELECT ok, extract(epoch FROM clock_timestamp())::float8 AS at"
                    + " FROM tb_acquire_wait(?, ?, make_interval(secs => ?)) AS ok");
            PreparedStatement peek = db.prepareStatement("SELECT granted, remaining FROM tb_peek(?, ?)");
            peek.setString(1, BUCKET);
            peek.setDouble(2, COST);
            try (ResultSet rs = peek.executeQuery()) {
                rs.next();
                Map<String, Object> seen = new LinkedHashMap<>();
                seen.put("granted", rs.getBoolean(1));
                seen.put("remaining", rs.getDouble(2));
                r.put("peek", seen);
            }

            // alone on solo:jdbc (made from the template solo:*), a retry
            // after sleeping retry_after_seconds must be granted, every time
            while ((Integer) r.get("solo_retried") < SOLO_ROUNDS) {
                if (tryOnce("solo:" + NAME)[0] == 0) {
                    add("solo_retried", 1);
                    add("solo_retried_granted", (int) tryOnce("solo:" + NAME)[0]);
                }
            }

            if (BARRIER != 0) {  // start with the others: run.sh holds this lock until all wait
                try (PreparedStatement barrier = db.prepareStatement("SELECT pg_advisory_xact_lock_shared(?)")) {
                    barrier.setLong(1, BARRIER);
                    barrier.executeQuery().close();
                }
            }
            try (ResultSet rs = db.createStatement().executeQuery(
                    "SELECT extract(epoch FROM clock_timestamp())::float8")) {
                rs.next();
                r.put("first_call", rs.getDouble(1));
            }
            boolean afterDenial = false;
            long end = System.nanoTime() + (long) (SECONDS * 1e9);
            for (int calls = 1; System.nanoTime() - end < 0; calls++) {
                boolean granted;
                double at;
                if (calls % 10 == 5) {
                    waitStmt.setString(1, BUCKET);
                    waitStmt.setDouble(2, COST);
                    waitStmt.setDouble(3, WAIT_TIMEOUT);
                    try (ResultSet rs = waitStmt.executeQuery()) {
                        rs.next();
                        granted = rs.getBoolean("ok");
                        at = rs.getDouble("at");
                    }
                    add("waits", 1);
                    add("waits_granted", granted ? 1 : 0);
                    afterDenial = false;
                } else {
                    double[] answer = tryOnce(BUCKET);
                    granted = answer[0] == 1;
                    at = answer[1];
                    if (afterDenial) {
                        add("retried", 1);
                        add("retried_granted", granted ? 1 : 0);
                    }
                    afterDenial = !granted;
                    add("denials", granted ? 0 : 1);
                }
                if (granted) {
                    add("grants", 1);
                    r.put("last_grant", at);
                }
            }
        }
        System.out.println(json(r));
    }

    // JSON for the few types r holds: maps, strings, numbers, booleans, null
    static String json(Object v) {
        if (v instanceof String) {
            return "\"" + v + "\"";
        }
        if (!(v instanceof Map)) {
            return String.valueOf(v);
        }
        StringBuilder out = new StringBuilder();
        for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
            out.append(out.length() == 0 ? "{" : ", ").append(json(e.getKey())).append(": ").append(json(e.getValue()));
        }
        return out.append('}').toString();
    }

    public static void main(String[] args) throws Exception {
        new Client().run();
    }
}
