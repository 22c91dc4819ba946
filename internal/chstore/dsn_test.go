package chstore

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tailcause/tailcause/internal/testkit"
	"github.com/tailcause/tailcause/internal/tlsfiles"
)

func TestDSN(t *testing.T) {
	c := DefaultConfig()
	c.DSN = "clickhouse://svc:pa55word@ch-0:9440,ch-1:9440/telemetry?secure=true&dial_timeout=3s"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r, o, err := c.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if r.Addr != "ch-0:9440,ch-1:9440" || r.Database != "telemetry" || o.Auth.Username != "svc" || o.Auth.Password != "pa55word" || o.TLS == nil {
		t.Errorf("resolved %+v, options addr %v auth %s tls %v", r, o.Addr, o.Auth.Username, o.TLS != nil)
	}
	if !c.Secure() || c.Hosts() != "ch-0:9440,ch-1:9440" {
		t.Errorf("Secure %v Hosts %q", c.Secure(), c.Hosts())
	}

	// Username and Password fill what the DSN leaves out; Database stays
	// when the DSN names none.
	c = DefaultConfig()
	c.DSN, c.Username, c.Password = "clickhouse://h:9000", "reader", "from-env"
	r, o, _ = c.resolve()
	if o.Auth.Username != "reader" || o.Auth.Password != "from-env" || r.Database != "tailcause" || c.Secure() {
		t.Errorf("fill: user %q password %q database %q secure %v", o.Auth.Username, o.Auth.Password, r.Database, c.Secure())
	}

	// Mistakes, and no error shows the password.
	const pw = "Very-Secret-77"
	for _, dsn := range []string{
		"clickhouse://u:" + pw + "@h:notaport/db",
		"clickhouse://u:" + pw + "@h:9000/db?tls_server_name=x",
		"http://u:" + pw + "@h:8123/db",
		"clickhouse://u@h:9000/db?password=" + pw + "&dial_timeout=soon",
		"clickhouse://u:" + pw + "@/db",
	} {
		c := DefaultConfig()
		c.DSN = dsn
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: no error", strings.ReplaceAll(dsn, pw, "***"))
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("the error shows the password: %v", err)
		}
		if !strings.HasPrefix(err.Error(), "clickhouse dsn: ") {
			t.Errorf("error %q does not say it is about the DSN", err)
		}
	}
}

// TestDSNOnTheServer connects with a DSN whose first host is down (the
// driver goes on to the next) and whose path names the database, and shows
// that a wrong password is refused by the server (516) without the error
// showing it.
func TestDSNOnTheServer(t *testing.T) {
	addr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, addr)
	dead := deadAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c := DefaultConfig()
	c.DSN = "clickhouse://default@" + dead + "," + addr + "/" + db + "?dial_timeout=2s"
	st, err := Open(ctx, c)
	if err != nil {
		t.Fatalf("open with a DSN: %v", err)
	}
	defer st.Close()
	if st.Database() != db {
		t.Errorf("database %q, want the DSN's %q", st.Database(), db)
	}
	var cur string
	if err := st.Conn().QueryRow(ctx, "SELECT currentDatabase()").Scan(&cur); err != nil || cur != db {
		t.Errorf("current database %q (%v), want %q", cur, err, db)
	}

	const wrong = "wrong-Password-31"
	c.DSN = "clickhouse://default:" + wrong + "@" + addr + "/" + db
	_, err = Open(ctx, c)
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || ex.Code != 516 {
		t.Fatalf("wrong password: %v, want exception 516 (authentication failed)", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("the error shows the password: %v", err)
	}
}

// TestTLS connects to the real ClickHouse over TLS with a CA file, a server
// name and a DSN with secure=true. The dev server (chdb's clickhouse-local
// 26.9) cannot open its secure port (SYSTEM START LISTEN takes only TCP and
// HTTP there; see deploy/dev/README.md), so the TLS is terminated by a
// proxy in front of its native port: what is tested is tailcause's client
// side (certificate verification, SNI, the DSN's TLS settings) against a
// real server behind TLS, not ClickHouse's own TLS implementation.
func TestTLS(t *testing.T) {
	addr := testkit.ClickHouse(t)
	db := testkit.FreshDatabase(t, addr)
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	files := ca.IssueFiles(t, dir, "clickhouse", "clickhouse", "clickhouse.test", "127.0.0.1")
	proxy, handshakes := tlsProxy(t, files, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	open := func(edit func(*Config)) (*Store, error) {
		c := DefaultConfig()
		c.Addr, c.Database, c.DialTimeout = proxy, db, 3*time.Second
		edit(&c)
		return Open(ctx, c)
	}
	check := func(name string, edit func(*Config)) {
		t.Helper()
		before := handshakes.Load()
		st, err := open(edit)
		if err != nil {
			t.Fatalf("%s: open over TLS: %v", name, err)
		}
		defer st.Close()
		var one uint8
		if err := st.Conn().QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("%s: query over TLS: %v", name, err)
		}
		if handshakes.Load() == before {
			t.Errorf("%s: no TLS handshake reached the proxy", name)
		}
	}
	// The CA file and the certificate's IP address (--clickhouse-tls-ca).
	tc, err := tlsfiles.ClientConfig(files.CA, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	check("CA file", func(c *Config) { c.TLS = tc })
	// A server name other than the host dialled (--clickhouse-tls-server-name).
	named, _ := tlsfiles.ClientConfig(files.CA, "", "", "clickhouse.test")
	check("server name", func(c *Config) { c.TLS = named })
	// A DSN with secure=true and the CA file beside it.
	check("DSN secure=true", func(c *Config) {
		c.DSN = "clickhouse://default@" + proxy + "/" + db + "?secure=true&tls_server_name=clickhouse.test"
		c.TLS = named
	})

	// Refusals: an unknown CA (the system's roots), a wrong server name,
	// and plaintext to the TLS port.
	if _, err := open(func(c *Config) { c.DSN = "clickhouse://default@" + proxy + "/" + db + "?secure=true&dial_timeout=3s" }); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("unknown CA: %v", err)
	}
	wrongName, _ := tlsfiles.ClientConfig(files.CA, "", "", "elsewhere.test")
	if _, err := open(func(c *Config) { c.TLS = wrongName }); err == nil || !strings.Contains(err.Error(), "certificate is valid for") {
		t.Errorf("wrong server name: %v", err)
	}
	if _, err := open(func(*Config) {}); err == nil {
		t.Error("plaintext to the TLS port succeeded")
	}
}

// tlsProxy serves TLS with files' certificate on a free port and forwards
// each connection to backend; it counts completed handshakes.
func tlsProxy(t *testing.T, files testkit.TLSFiles, backend string) (string, *atomic.Int64) {
	t.Helper()
	cfg, err := tlsfiles.ServerConfig(files.Cert, files.Key, "")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var handshakes atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					c.Close()
					return
				}
				handshakes.Add(1)
				b, err := net.Dial("tcp", backend)
				if err != nil {
					c.Close()
					return
				}
				mu.Lock()
				conns = append(conns, c, b)
				mu.Unlock()
				go func() { _, _ = io.Copy(b, c); b.Close() }()
				_, _ = io.Copy(c, b)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String(), &handshakes
}

// deadAddr is a local address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}
