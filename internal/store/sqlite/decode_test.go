package sqlite

import (
	"slices"
	"testing"
)

// TestDecodeList checks that list columns decode as json.Unmarshal into a nil slice does (an
// empty list non-nil, "null" nil) and that the empty list, which every access decision reads
// for most systems, is decoded without the JSON decoder's allocations.
func TestDecodeList(t *testing.T) {
	tests := []struct {
		col     string
		want    []string
		wantNil bool
		wantErr bool
	}{
		{col: "[]", want: []string{}},
		{col: "null", wantNil: true},
		{col: `["aes128-ctr","chacha20-poly1305@openssh.com"]`, want: []string{"aes128-ctr", "chacha20-poly1305@openssh.com"}},
		{col: `[1]`, wantErr: true},
		{col: ``, wantErr: true},
	}
	for _, tt := range tests {
		got, err := decodeList(tt.col)
		if (err != nil) != tt.wantErr {
			t.Fatalf("decodeList(%q) error = %v, want error %v", tt.col, err, tt.wantErr)
		}
		if tt.wantErr {
			continue
		}
		if (got == nil) != tt.wantNil || !slices.Equal(got, tt.want) {
			t.Errorf("decodeList(%q) = %#v, want %#v (nil %v)", tt.col, got, tt.want, tt.wantNil)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = decodeList("[]") }); n > 0 {
		t.Errorf("decodeList(\"[]\") makes %v allocations, want none", n)
	}
}
