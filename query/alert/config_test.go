package alert

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/testkit"
)

// TestExampleConfig loads the config shipped in deploy/.
func TestExampleConfig(t *testing.T) {
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(filepath.Join(root, "deploy", "config", "webhooks.example.json"))
	if err != nil {
		t.Fatalf("load deploy/config/webhooks.example.json: %v", err)
	}
	if len(c.Receivers) != 2 || c.Receivers[0].Format != FormatGeneric || c.Receivers[1].Format != FormatSlack {
		t.Errorf("receivers %+v: want a generic and a slack receiver", c.Receivers)
	}
	if c.Receivers[0].SecretEnv == "" || time.Duration(c.Receivers[1].Timeout) != 5*time.Second {
		t.Errorf("receivers %+v: want a secret on the first, 5s timeout on the second", c.Receivers)
	}
	// The secret must be in the environment for the dispatcher to start.
	if _, err := NewDispatcher(fakeStore{}, c, Options{Getenv: func(string) string { return "" }}); err == nil || !strings.Contains(err.Error(), "TAILCAUSE_WEBHOOK_SECRET_ONCALL") {
		t.Errorf("dispatcher without the secret in the environment: %v, want an error naming the variable", err)
	}
	if _, err := NewDispatcher(fakeStore{}, c, Options{Getenv: func(string) string { return "s3cret" }}); err != nil {
		t.Errorf("dispatcher with the secret: %v", err)
	}
}

func TestDefaultConfigValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"receivers":[{"name":"a","url":"ftp://x"}]}`, "absolute http(s) URL"},
		{`{"receivers":[{"name":"a","url":"https://x","format":"teams"}]}`, "format"},
		{`{"receivers":[{"name":"a","url":"https://x"},{"name":"a","url":"https://y"}]}`, "duplicate"},
		{`{"receivers":[{"name":"","url":"https://x"}]}`, "name is required"},
		{`{"receivers":[{"name":"a","url":"https://x","timeout":"5m"}]}`, "timeout"},
		{`{"receivers":[{"name":"a","url":"https://x","timeout":"soon"}]}`, "duration"},
		{`{"receivers":[{"name":"a","url":"https://x","events":["paged"]}]}`, "event"},
		{`{"receivers":[],"max_attempts":-1}`, "max_attempts"},
		{`{"receivers":[],"initial_backoff":"1m","max_backoff":"1s"}`, "backoff"},
		{`{"receivers":[],"recievers":[]}`, "unknown field"},
	} {
		_, err := ParseConfig([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.json, err, c.want)
		}
	}
}

// TestClaimLease: the default lease covers a whole scan; a set lease too
// short to claim, send and record one delivery is refused.
func TestClaimLease(t *testing.T) {
	c := DefaultConfig()
	c.Receivers = []Receiver{{Name: "a", URL: "https://h.example/x", Timeout: Duration(2 * time.Second)}, {Name: "b", URL: "https://h.example/y"}}
	c = c.withDefaults()
	if got, want := c.lease(), time.Second+25*10*time.Second+recordTimeout+30*time.Second; got != want {
		t.Errorf("default lease %v, want %v (settle + 25 rounds of the longest timeout + recording + 30s)", got, want)
	}
	c.ClaimLease = Duration(20 * time.Second)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "claim_lease") {
		t.Errorf("a 20s lease with a 10s receiver timeout: %v, want a claim_lease error", err)
	}
	c.ClaimLease = Duration(2 * time.Minute)
	if err := c.Validate(); err != nil {
		t.Errorf("a 2m lease: %v", err)
	}
}
