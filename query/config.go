package query

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Config bounds what the API serves. The zero value is not usable; start
// from DefaultConfig.
type Config struct {
	// Token is the bearer token every route but /healthz and /readyz
	// requires. Empty is allowed only with AllowNoAuth (local demos).
	Token       string
	AllowNoAuth bool

	// MaxRange is the longest [from, to) of request-level queries (P99
	// breakdowns, time series); their bounds are required.
	MaxRange time.Duration
	// MaxIncidentRange is the longest [from, to) of the incident list;
	// DefaultIncidentRange is the range ending now used when it has none.
	MaxIncidentRange     time.Duration
	DefaultIncidentRange time.Duration
	// DrillDownRange is how far back a request drill-down looks when it is
	// given no bounds (and the longest span it accepts when it is).
	DrillDownRange time.Duration

	// DefaultLimit and MaxLimit bound every page of results.
	DefaultLimit int
	MaxLimit     int
	// MaxExemplars bounds the exemplar traces of one incident; MaxStalls the
	// token stalls of one request.
	MaxExemplars int
	MaxStalls    int

	// QueryTimeout bounds every ClickHouse query of one API request.
	QueryTimeout time.Duration

	// BaseURL is the server's external URL (scheme://host[:port][/prefix]),
	// used for report links sent in alerts; empty makes links relative.
	BaseURL string
	// ReportLinkTTL is how long a signed report link stays valid.
	ReportLinkTTL time.Duration
}

// DefaultConfig is a server with safe bounds and no token yet.
func DefaultConfig() Config {
	return Config{
		MaxRange:             24 * time.Hour,
		MaxIncidentRange:     90 * 24 * time.Hour,
		DefaultIncidentRange: 7 * 24 * time.Hour,
		DrillDownRange:       7 * 24 * time.Hour,
		DefaultLimit:         50,
		MaxLimit:             500,
		MaxExemplars:         50,
		MaxStalls:            1000,
		QueryTimeout:         30 * time.Second,
		ReportLinkTTL:        7 * 24 * time.Hour,
	}
}

// minTokenLen keeps guessable tokens out.
const minTokenLen = 16

// Validate reports every configuration mistake.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.Token == "" && !c.AllowNoAuth:
		bad("a bearer token is required (or explicitly allow no authentication)")
	case c.Token != "" && len(c.Token) < minTokenLen:
		bad("bearer token is %d bytes: want at least %d", len(c.Token), minTokenLen)
	}
	for name, d := range map[string]time.Duration{
		"max range": c.MaxRange, "max incident range": c.MaxIncidentRange,
		"default incident range": c.DefaultIncidentRange, "drill-down range": c.DrillDownRange,
		"query timeout": c.QueryTimeout, "report link ttl": c.ReportLinkTTL,
	} {
		if d <= 0 {
			bad("%s %v: want > 0", name, d)
		}
	}
	if c.DefaultIncidentRange > c.MaxIncidentRange {
		bad("default incident range %v exceeds max incident range %v", c.DefaultIncidentRange, c.MaxIncidentRange)
	}
	if c.MaxRange > 31*24*time.Hour {
		bad("max range %v: want at most 31 days (request-level queries scan raw rows)", c.MaxRange)
	}
	if c.DefaultLimit < 1 || c.MaxLimit < c.DefaultLimit || c.MaxLimit > 10000 {
		bad("limits default %d, max %d: want 1 <= default <= max <= 10000", c.DefaultLimit, c.MaxLimit)
	}
	if c.MaxExemplars < 1 || c.MaxExemplars > 1000 {
		bad("max exemplars %d: want 1..1000", c.MaxExemplars)
	}
	if c.MaxStalls < 1 || c.MaxStalls > 100000 {
		bad("max stalls %d: want 1..100000", c.MaxStalls)
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			bad("base url %q: want http(s)://host[:port][/prefix]", c.BaseURL)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid query config: %w", err)
	}
	return nil
}
