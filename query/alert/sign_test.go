package alert

import (
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"incident_id":"i"}`)
	h := Sign(secret, now, body)
	if h != "t=1700000000,v1="+mac(secret, "1700000000", body) {
		t.Fatalf("header %s", h)
	}
	if err := Verify(secret, h, body, now.Add(time.Minute), 5*time.Minute); err != nil {
		t.Errorf("verify: %v", err)
	}
	for name, c := range map[string]struct {
		secret, body []byte
		header       string
		at           time.Time
	}{
		"tampered body": {secret, []byte(`{"incident_id":"j"}`), h, now},
		"wrong secret":  {[]byte("other"), body, h, now},
		"replayed late": {secret, body, h, now.Add(10 * time.Minute)},
		"no signature":  {secret, body, "t=1700000000", now},
		"garbage":       {secret, body, "v1", now},
	} {
		if err := Verify(c.secret, c.header, c.body, c.at, 5*time.Minute); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	// Rotation: a header with two v1 values verifies under either secret.
	rot := h + ",v1=" + mac([]byte("next"), "1700000000", body)
	if err := Verify([]byte("next"), rot, body, now, time.Minute); err != nil {
		t.Errorf("rotated secret: %v", err)
	}
}
