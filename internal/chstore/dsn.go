package chstore

import (
	"errors"
	"net/url"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// parseDSN parses Config.DSN. Its errors never contain the DSN's password
// (clickhouse-go redacts its URL errors; what it says otherwise is redacted
// here too).
func parseDSN(dsn string) (*clickhouse.Options, error) {
	o, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		msg := err.Error()
		if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
		if pw := passwordParam(dsn); pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
		return nil, errors.New("clickhouse dsn: " + msg)
	}
	if o.Protocol != clickhouse.Native {
		return nil, errors.New("clickhouse dsn: only the native protocol (clickhouse://host:9000 or :9440 with secure=true) is supported, not http(s)")
	}
	if len(o.Addr) == 0 {
		return nil, errors.New("clickhouse dsn: no host")
	}
	return o, nil
}

func passwordParam(dsn string) string {
	_, q, ok := strings.Cut(dsn, "?")
	if !ok {
		return ""
	}
	v, err := url.ParseQuery(q)
	if err != nil {
		return ""
	}
	return v.Get("password")
}

// resolve applies the DSN to cfg: its hosts (Addr becomes their list, for
// messages), the database it names (replacing Database), and the user and
// password it carries (Username and Password fill what it leaves out).
func (c Config) resolve() (Config, *clickhouse.Options, error) {
	var o clickhouse.Options
	if c.DSN == "" {
		o.Addr = []string{c.Addr}
	} else {
		p, err := parseDSN(c.DSN)
		if err != nil {
			return c, nil, err
		}
		o = *p
		c.Addr = strings.Join(o.Addr, ",")
		if o.Auth.Database != "" {
			c.Database = o.Auth.Database
		}
	}
	if o.Auth.Username == "" {
		o.Auth.Username = c.Username
	}
	if o.Auth.Password == "" {
		o.Auth.Password = c.Password
	}
	if o.Auth.Username == "" {
		o.Auth.Username = "default"
	}
	c.Username = o.Auth.Username
	if c.TLS != nil {
		o.TLS = c.TLS.Clone()
	}
	return c, &o, nil
}

// options are the connection options for database db.
func (c Config) options(db string) (*clickhouse.Options, error) {
	_, o, err := c.resolve()
	if err != nil {
		return nil, err
	}
	o.Auth.Database = db
	if c.DialTimeout > 0 {
		o.DialTimeout = c.DialTimeout
	}
	if c.MaxConns > 0 {
		o.MaxOpenConns, o.MaxIdleConns = c.MaxConns, c.MaxConns
	}
	return o, nil
}

// Secure reports whether connections use TLS (Config.TLS or the DSN's
// secure=true).
func (c Config) Secure() bool {
	if c.TLS != nil {
		return true
	}
	_, o, err := c.resolve()
	return err == nil && o.TLS != nil
}

// Hosts lists the servers the configuration connects to (the DSN's hosts,
// or Addr), for messages: never the DSN itself.
func (c Config) Hosts() string {
	r, _, err := c.resolve()
	if err != nil {
		return ""
	}
	return r.Addr
}
