package alert

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Request headers of a delivery.
const (
	// HeaderSignature is "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
	HeaderSignature = "X-Tailcause-Signature"
	// HeaderDelivery is the idempotency id <incident_id>:<version>:<event>,
	// the same on every attempt and for every receiver.
	HeaderDelivery = "X-Tailcause-Delivery"
	// HeaderEvent is the event kind; HeaderAttempt the 1-based attempt.
	HeaderEvent   = "X-Tailcause-Event"
	HeaderAttempt = "X-Tailcause-Attempt"
)

// Sign returns the X-Tailcause-Signature value of body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against body, as a receiver should:
// the HMAC must match (constant-time) and t must be within tolerance of
// now, which bounds replays. Several v1= values (secret rotation) are
// accepted if any matches.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return errors.New("verify signature: want t=<unix>,v1=<hex>")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("verify signature: timestamp %q: %w", ts, err)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("verify signature: timestamp %s is %v away from now (tolerance %v)", ts, d, tolerance)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("verify signature: no v1 signature matches")
}
