package wanem

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// prefix returns the multiplier of a lower-case SI or IEC prefix.
func prefix(p string) (float64, bool) {
	switch p {
	case "":
		return 1, true
	case "k":
		return 1e3, true
	case "m":
		return 1e6, true
	case "g":
		return 1e9, true
	case "t":
		return 1e12, true
	case "ki":
		return 1 << 10, true
	case "mi":
		return 1 << 20, true
	case "gi":
		return 1 << 30, true
	case "ti":
		return 1 << 40, true
	}
	return 0, false
}

// ParseRate parses a link rate and returns it in bytes per second; 0 means unlimited.
//
// Bit rates use tc-style units: "bit", "kbit", "mbit", "gbit", "tbit" (powers of 1000) and
// "kibit" … "tibit" (powers of 1024), e.g. "1gbit" or "100mbit". Byte rates need an upper-case
// "B": "B", "KB", "MB", "GB", "TB", "KiB" … "TiB", with an optional "/s", e.g. "10MB/s" or
// "1GiB/s". A plain number is bytes per second. Fractions ("1.5gbit") are allowed; ambiguous
// spellings such as "100mb" or "100mbps" are rejected rather than guessed.
func ParseRate(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("wanem: empty rate")
	}
	if t[0] == '-' {
		return 0, fmt.Errorf("wanem: rate %q must not be negative", s)
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("wanem: rate %q does not start with a number", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("wanem: rate %q: %w", s, err)
	}
	mult, err := rateUnit(unit)
	if err != nil {
		return 0, fmt.Errorf("wanem: rate %q: %w", s, err)
	}
	bps := v * mult
	switch {
	case bps >= math.MaxInt64:
		return 0, fmt.Errorf("wanem: rate %q is too large", s)
	case bps > 0 && bps < 1:
		return 0, fmt.Errorf("wanem: rate %q is below 1 byte per second", s)
	}
	return int64(math.Round(bps)), nil
}

// rateUnit returns how many bytes per second one unit of u is.
func rateUnit(u string) (float64, error) {
	lower := strings.ToLower(u)
	switch {
	case u == "":
		return 1, nil
	case strings.HasSuffix(lower, "bps"):
		return 0, fmt.Errorf("ambiguous unit %q: write bits as \"mbit\" or bytes as \"MB/s\"", u)
	case strings.HasSuffix(lower, "bit") || strings.HasSuffix(lower, "bit/s"):
		p, ok := prefix(strings.TrimSuffix(strings.TrimSuffix(lower, "/s"), "bit"))
		if !ok {
			return 0, fmt.Errorf("unknown unit %q", u)
		}
		return p / 8, nil
	}
	bytesUnit := strings.TrimSuffix(u, "/s")
	switch {
	case strings.HasSuffix(bytesUnit, "B"):
		p, ok := prefix(strings.ToLower(strings.TrimSuffix(bytesUnit, "B")))
		if !ok {
			return 0, fmt.Errorf("unknown unit %q", u)
		}
		return p, nil
	case strings.HasSuffix(bytesUnit, "b"):
		return 0, fmt.Errorf("ambiguous unit %q: write bits as %q or bytes with an upper-case B", u,
			strings.TrimSuffix(bytesUnit, "b")+"bit")
	}
	return 0, fmt.Errorf("unknown unit %q (want e.g. \"100mbit\", \"1gbit\", \"10MB/s\", \"1GiB/s\")", u)
}
