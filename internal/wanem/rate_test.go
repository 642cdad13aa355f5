package wanem

import (
	"strings"
	"testing"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string // substring of the error; empty means success
	}{
		{in: "1gbit", want: 125_000_000},
		{in: "1Gbit", want: 125_000_000},
		{in: "100mbit", want: 12_500_000},
		{in: "500kbit", want: 62_500},
		{in: "1.5gbit", want: 187_500_000},
		{in: "1gibit/s", want: 1 << 27},
		{in: "800bit", want: 100},
		{in: "10MB/s", want: 10_000_000},
		{in: "10MB", want: 10_000_000},
		{in: "1GiB/s", want: 1 << 30},
		{in: "20MiB/s", want: 20 << 20},
		{in: "64KiB", want: 64 << 10},
		{in: "1kB/s", want: 1000},
		{in: "5B/s", want: 5},
		{in: "12345", want: 12345},
		{in: " 2 mbit ", want: 250_000},
		{in: "0", want: 0},
		{in: "", wantErr: "empty"},
		{in: "fast", wantErr: "does not start with a number"},
		{in: "-1gbit", wantErr: "negative"},
		{in: "1.2.3", wantErr: "invalid syntax"},
		{in: "100mb", wantErr: "ambiguous"},
		{in: "100mbps", wantErr: "ambiguous"},
		{in: "10MiB/h", wantErr: "unknown unit"},
		{in: "10xbit", wantErr: "unknown unit"},
		{in: "10furlongs", wantErr: "unknown unit"},
		{in: "1bit", wantErr: "below 1 byte"},
		{in: "100000000tbit", wantErr: "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRate(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRate(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseRate(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}
