package k8s

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tailcause/tailcause/query/alert"
)

// productionWebhooks is the webhook config the production overlay mounts.
var productionWebhooks = filepath.Join("overlays", "production", "webhooks.json")

// webhookSecretEnv reports whether name is the secret_env of a receiver of
// the production webhook config (query reads it through the config).
func webhookSecretEnv(t *testing.T, name string) bool {
	t.Helper()
	c, err := alert.LoadConfig(productionWebhooks)
	if err != nil {
		t.Fatalf("%s: %v", productionWebhooks, err)
	}
	for _, r := range c.Receivers {
		if r.SecretEnv == name {
			return true
		}
	}
	return false
}

// kustomizations are the trees TestBase and TestProduction build.
var kustomizations = map[string]bool{"base": true, filepath.Join("overlays", "production"): true,
	// TestProductionSecure (secure_test.go) builds the overlay and with it the component.
	filepath.Join("overlays", "production-secure"): true, filepath.Join("components", "tls-sasl"): true}

// TestReferenceConfigs walks deploy/ and loads every config file shipped
// there with the loader that will read it, or the strictest stand-in:
//
//   - webhook configs (*.json naming webhooks): alert.LoadConfig, strict;
//   - kustomizations: built and decoded strictly by TestBase/TestProduction
//     (a new one must be added there);
//   - the Collector configs and manifest: parsed here, validated with the
//     built Collector by deploy/otelcol's test;
//   - *.env: KEY=VALUE lines naming variables cmd/tailcause reads;
//   - other YAML must parse; XML (ClickHouse users.d, the dev Maven pom)
//     must be well-formed.
//
// A file of another kind fails the test until a loader is added here.
func TestReferenceConfigs(t *testing.T) {
	facts := readBinaryFacts(t)
	deploy := ".."
	seen := 0
	err := filepath.WalkDir(deploy, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(deploy, path)
		ext := filepath.Ext(path)
		switch ext {
		case ".md", ".sh", ".go", ".java", ".py":
			return nil // documentation, scripts, code
		}
		seen++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch {
		case ext == ".json" && strings.Contains(filepath.Base(path), "webhooks"):
			if _, err := alert.LoadConfig(path); err != nil {
				t.Errorf("%s: %v", rel, err)
			}
		case filepath.Base(path) == "kustomization.yaml":
			dir, _ := filepath.Rel(filepath.Join(deploy, "k8s"), filepath.Dir(path))
			if strings.HasPrefix(rel, "k8s"+string(filepath.Separator)) && kustomizations[dir] {
				return nil
			}
			if rel == filepath.Join("otelcol", "kustomization.yaml") {
				checkCollectorKustomization(t, filepath.Dir(path))
				return nil
			}
			t.Errorf("%s: a kustomization no test builds: add it to TestBase/TestProduction", rel)
		case ext == ".yaml" || ext == ".yml":
			var v any
			if err := yaml.Unmarshal(b, &v); err != nil {
				t.Errorf("%s: %v", rel, err)
			}
		case ext == ".env":
			checkEnvFile(t, rel, b, facts)
		case ext == ".xml":
			if err := wellFormedXML(b); err != nil {
				t.Errorf("%s: %v", rel, err)
			}
		case ext == ".Dockerfile" && filepath.Dir(rel) == "docker":
			// deploy/docker's own test runs their build and checks their wiring.
			if !strings.HasPrefix(string(b), "# syntax=docker/dockerfile:1\n") || !strings.Contains(string(b), "\nFROM ") {
				t.Errorf("%s: not a Dockerfile (want the syntax line and a FROM)", rel)
			}
		default:
			t.Errorf("%s: no loader validates this config: add one to TestReferenceConfigs", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Errorf("only %d config files under deploy/", seen)
	}
}

func checkEnvFile(t *testing.T, rel string, b []byte, facts binaryFacts) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || v == "" {
			t.Errorf("%s:%d: want KEY=VALUE, got %q", rel, n, line)
			continue
		}
		if !facts.env[k] {
			t.Errorf("%s:%d: %s is not a variable cmd/tailcause reads", rel, n, k)
		}
		if k == "TAILCAUSE_KAFKA" || k == "TAILCAUSE_CLICKHOUSE" {
			for _, hp := range strings.Split(v, ",") {
				if host, port, ok := strings.Cut(hp, ":"); !ok || host == "" || port == "" {
					t.Errorf("%s:%d: %s: %q is not host:port", rel, n, k, hp)
				}
			}
		}
	}
}

func wellFormedXML(b []byte) error {
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
