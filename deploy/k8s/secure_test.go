package k8s

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestProductionSecure builds the production overlay with the tls-sasl
// component: still a valid production tree; the shared ConfigMap gains the
// security settings, each a file of the mounted Secret tailcause-tls (the
// SASL password too: no secret in a variable); every role and step mounts
// that Secret read-only where the paths point; query's probes, on its API
// port, speak HTTPS.
func TestProductionSecure(t *testing.T) {
	r := build(t, filepath.Join("overlays", "production-secure"))
	checkProduction(t, r)
	facts := readBinaryFacts(t)

	var cm *corev1.ConfigMap
	for name, c := range r.configMaps {
		if strings.HasPrefix(name, "tailcause-config") {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap tailcause-config")
	}
	for _, k := range []string{
		"TAILCAUSE_KAFKA_TLS_CA", "TAILCAUSE_KAFKA_SASL_MECHANISM", "TAILCAUSE_KAFKA_SASL_USER", "TAILCAUSE_KAFKA_SASL_PASSWORD_FILE",
		"TAILCAUSE_CLICKHOUSE_TLS_CA", "TAILCAUSE_TLS_CERT", "TAILCAUSE_TLS_KEY",
	} {
		v, ok := cm.Data[k]
		if !ok {
			t.Errorf("tailcause-config lacks %s", k)
			continue
		}
		if !facts.env[k] {
			t.Errorf("the binary does not read %s", k)
		}
		if k != "TAILCAUSE_KAFKA_SASL_MECHANISM" && k != "TAILCAUSE_KAFKA_SASL_USER" && !strings.HasPrefix(v, "/etc/tailcause/tls/") {
			t.Errorf("%s=%q is not a file of the mounted Secret", k, v)
		}
	}
	if cm.Data["TAILCAUSE_KAFKA_SASL_MECHANISM"] != "SCRAM-SHA-512" {
		t.Errorf("mechanism %q", cm.Data["TAILCAUSE_KAFKA_SASL_MECHANISM"])
	}
	for k := range cm.Data {
		if strings.Contains(k, "PASSWORD") && !strings.HasSuffix(k, "_FILE") || strings.Contains(k, "TOKEN") && !strings.HasSuffix(k, "_FILE") {
			t.Errorf("tailcause-config holds the secret %s", k)
		}
	}

	pods := map[string]corev1.PodSpec{}
	for _, role := range roles {
		if d := r.deployments["tailcause-"+role]; d != nil {
			pods[role] = d.Spec.Template.Spec
		}
	}
	for step := range steps {
		if j := r.jobs["tailcause-"+step]; j != nil {
			pods[step] = j.Spec.Template.Spec
		}
	}
	if len(pods) != len(roles)+len(steps) {
		t.Fatalf("found %d of the %d roles and steps", len(pods), len(roles)+len(steps))
	}
	for role, pod := range pods {
		c := pod.Containers[0]
		mounted, secret := false, false
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.Name == "tls" && m.MountPath == "/etc/tailcause/tls" && m.ReadOnly
		}
		for _, v := range pod.Volumes {
			secret = secret || v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "tailcause-tls"
		}
		if !mounted || !secret {
			t.Errorf("%s: the Secret tailcause-tls is not mounted read-only at /etc/tailcause/tls (mount %v, volume %v)", role, mounted, secret)
		}
		fromConfig := false
		for _, ef := range c.EnvFrom {
			fromConfig = fromConfig || ef.ConfigMapRef != nil && strings.HasPrefix(ef.ConfigMapRef.Name, "tailcause-config")
		}
		if !fromConfig {
			t.Errorf("%s: does not read tailcause-config", role)
		}
		if role == "query" {
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
					t.Errorf("query: a probe of its TLS API port must use HTTPS: %+v", p)
				}
			}
		}
	}
}
