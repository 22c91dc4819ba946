package normalize

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseRustDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0ns", 0},
		{"12ns", 12},
		{"350µs", 350 * time.Microsecond}, // U+00B5, what Rust prints
		{"350μs", 350 * time.Microsecond}, // U+03BC, Greek mu
		{"350us", 350 * time.Microsecond},
		{"1.5µs", 1500},
		{"214.5µs", 214500},
		{"1.234567ms", 1234567},
		{"1ms", time.Millisecond},
		{"152.304713ms", 152304713},
		{"2.1s", 2100 * time.Millisecond},
		{"2s", 2 * time.Second},
		{"1.000000001s", time.Second + 1},
		{"0.5s", 500 * time.Millisecond},
		{"  3ms ", 3 * time.Millisecond},
		{"1.0000000019s", time.Second + 1}, // past ns resolution: truncated
		{"1.2345678ms", 1234567},           // sub-ns digits truncated
		{"9223372036.854775807s", time.Duration(1<<63 - 1)},
		{"9223372036854775807ns", time.Duration(1<<63 - 1)},
	}
	for _, tt := range tests {
		got, err := ParseRustDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseRustDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseRustDurationErrors(t *testing.T) {
	for _, in := range []string{
		"", " ", "ms", "1", "1.", ".5s", "-1ms", "+1ms", "1.5", "1 ms", "1m", "1h", "1.2.3s",
		"1e3ms", "NaN", "inf", "None", "Some(1ms)", "1s2ms", "1ms ms",
		"9223372036.854775808s", // one ns past MaxInt64
		"18446744073709551615.999999999s",
		"99999999999999999999999s", // overflows uint64 while reading digits
		strings.Repeat("1", 65) + "ns",
	} {
		if d, err := ParseRustDuration(in); err == nil {
			t.Errorf("ParseRustDuration(%q) = %v, want an error", in, d)
		}
	}
}

// rustDebug formats d as Rust's Debug for std::time::Duration does.
func rustDebug(d time.Duration) string {
	ns := uint64(d)
	frac := func(integer, fraction uint64, digits int, unit string) string {
		s := strconv.FormatUint(integer, 10)
		if fraction != 0 {
			f := strconv.FormatUint(fraction, 10)
			f = strings.Repeat("0", digits-len(f)) + f
			s += "." + strings.TrimRight(f, "0")
		}
		return s + unit
	}
	switch {
	case ns >= 1e9:
		return frac(ns/1e9, ns%1e9, 9, "s")
	case ns >= 1e6:
		return frac(ns/1e6, ns%1e6, 6, "ms")
	case ns >= 1e3:
		return frac(ns/1e3, ns%1e3, 3, "µs")
	}
	return strconv.FormatUint(ns, 10) + "ns"
}

func TestParseRustDurationRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1000, 1001, 999999, 1e6, 1234567, 1e9 - 1, 1e9, 1e9 + 1,
		2100 * time.Millisecond, 90 * time.Minute, 1<<63 - 1} {
		s := rustDebug(d)
		got, err := ParseRustDuration(s)
		if err != nil || got != d {
			t.Errorf("ParseRustDuration(%q) = %v, %v; want %v", s, got, err, d)
		}
	}
}

func FuzzParseRustDuration(f *testing.F) {
	for _, s := range []string{"1.234567ms", "2.1s", "350µs", "350us", "12ns", "", "1.", "9223372036.854775808s"} {
		f.Add(s)
	}
	f.Add("\xb5s")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseRustDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseRustDuration(%q) = %v < 0", s, d)
		}
		// Whatever parses must survive a Rust-formatted round trip.
		if back, err := ParseRustDuration(rustDebug(d)); err != nil || back != d {
			t.Fatalf("round trip of %q: %v -> %q -> %v, %v", s, d, rustDebug(d), back, err)
		}
	})
}
