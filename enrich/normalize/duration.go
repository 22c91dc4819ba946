package normalize

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// maxDurationText bounds the input ParseRustDuration looks at; the longest
// Rust Debug duration ("18446744073709551615.999999999s") is 31 bytes.
const maxDurationText = 64

var errDurationSyntax = errors.New("invalid syntax")

// ParseRustDuration parses a duration as Rust's Debug formatting of
// std::time::Duration prints it, which is how TGI records its timing span
// fields: "2.1s", "1.234567ms", "350µs", "12ns", "0ns". The microsecond unit
// is accepted as "µs" (U+00B5, what Rust prints), "μs" (U+03BC) or "us".
// Surrounding spaces are ignored. Fraction digits past nanosecond resolution
// are truncated. Negative values, missing units, and values past
// time.Duration's range (about 292 years) are errors.
func ParseRustDuration(s string) (time.Duration, error) {
	if len(s) > maxDurationText {
		return 0, fmt.Errorf("parse rust duration %.20q...: %w: too long", s, errDurationSyntax)
	}
	t := strings.TrimSpace(s)
	// Integer part.
	i := 0
	var whole uint64
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		d := uint64(t[i] - '0')
		if whole > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("parse rust duration %q: out of range", s)
		}
		whole = whole*10 + d
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("parse rust duration %q: %w: no leading digits", s, errDurationSyntax)
	}
	// Fraction, kept to 9 digits (nanoseconds of the largest unit).
	var frac uint64 // scaled so that frac/1e9 is the fraction
	if i < len(t) && t[i] == '.' {
		i++
		start := i
		scale := uint64(100_000_000)
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			frac += uint64(t[i]-'0') * scale
			scale /= 10
			i++
		}
		if i == start {
			return 0, fmt.Errorf("parse rust duration %q: %w: no digits after the point", s, errDurationSyntax)
		}
	}
	var unit uint64
	switch t[i:] {
	case "s":
		unit = uint64(time.Second)
	case "ms":
		unit = uint64(time.Millisecond)
	case "µs", "μs", "us":
		unit = uint64(time.Microsecond)
	case "ns":
		unit = 1
	case "":
		return 0, fmt.Errorf("parse rust duration %q: %w: missing unit", s, errDurationSyntax)
	default:
		return 0, fmt.Errorf("parse rust duration %q: %w: unknown unit %q", s, errDurationSyntax, t[i:])
	}
	fracNs := frac * unit / 1_000_000_000 // frac < 1e9 and unit <= 1e9: no overflow
	if whole > (math.MaxInt64-fracNs)/unit {
		return 0, fmt.Errorf("parse rust duration %q: out of range", s)
	}
	return time.Duration(whole*unit + fracNs), nil
}
