package study

import "testing"

func TestParseRunnable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"0.36 6.34 7.96 2/345 1234\n", 2, true},
		{"30.35 9.41 7.83 41/1020 99", 41, true},
		{"0.00 0.00 0.00 1/80 7", 1, true},
		{"0.36 6.34 7.96", 0, false},
		{"0.36 6.34 7.96 x/345 1", 0, false},
		{"0.36 6.34 7.96 345 1", 0, false},
		{"", 0, false},
	} {
		n, ok := parseRunnable(tc.in)
		if n != tc.want || ok != tc.ok {
			t.Errorf("parseRunnable(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.want, tc.ok)
		}
	}
}
