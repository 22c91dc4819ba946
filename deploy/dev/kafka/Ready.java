import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;

/**
 * Readiness probe for deploy/dev/kafka.sh: waits until the broker at args[0]
 * answers a DescribeCluster request that lists at least one (unfenced) broker
 * and a controller, or until args[1] seconds have passed. An optional args[2]
 * is a file of client properties (security.protocol, SASL, truststore) for a
 * secured listener.
 *
 * An open port is not enough: a KRaft broker accepts connections before it
 * has caught up with the metadata log and been unfenced, and until then
 * CreateTopics fails. Exit status 0 when ready, 1 on timeout.
 */
public final class Ready {
    public static void main(String[] args) throws InterruptedException, IOException {
        if (args.length != 2 && args.length != 3) {
            System.err.println("usage: Ready host:port timeout-seconds [client.properties]");
            System.exit(2);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[1]));
        Properties p = new Properties();
        if (args.length == 3) {
            try (InputStream in = new FileInputStream(args[2])) {
                p.load(in);
            }
        }
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        String last = "no answer";
        try (Admin admin = Admin.create(p)) {
            while (System.nanoTime() < deadline) {
                try {
                    DescribeClusterResult r = admin.describeCluster();
                    int brokers = r.nodes().get(3, TimeUnit.SECONDS).size();
                    boolean controller = r.controller().get(3, TimeUnit.SECONDS) != null;
                    if (brokers > 0 && controller) {
                        System.err.println("kafka: ready, cluster " + r.clusterId().get() + ", " + brokers + " broker(s)");
                        return;
                    }
                    last = brokers + " broker(s), controller " + (controller ? "known" : "unknown");
                } catch (Exception e) {
                    last = e.getCause() != null ? e.getCause().toString() : e.toString();
                }
                Thread.sleep(300);
            }
        }
        System.err.println("kafka: not ready after " + args[1] + "s: " + last);
        System.exit(1);
    }
}
