package sqlite

import (
	"encoding/json"
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
		{col: `["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ+x/y=="]`, want: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ+x/y=="}},
		{col: `[""]`, want: []string{""}},
		{col: `["a",""]`, want: []string{"a", ""}},
		{col: `["a\"b","c\\d","\u00e9"]`, want: []string{`a"b`, `c\d`, "é"}},
		{col: `["é", "x"]`, want: []string{"é", "x"}},
		{col: `[ "a" ]`, want: []string{"a"}},
		{col: "[\"bad\xff\"]", want: []string{"bad\uFFFD"}},
		{col: `[1]`, wantErr: true},
		{col: `["a",]`, wantErr: true},
		{col: `["a""b"]`, wantErr: true},
		{col: `["a`, wantErr: true},
		{col: `[","]`, want: []string{","}},
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
		var viaJSON []string // what the column decoded to before: the same, always
		if err := json.Unmarshal([]byte(tt.col), &viaJSON); err != nil || (viaJSON == nil) != (got == nil) || !slices.Equal(viaJSON, got) {
			t.Errorf("decodeList(%q) = %#v, json.Unmarshal gives %#v, %v", tt.col, got, viaJSON, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = decodeList("[]") }); n > 0 {
		t.Errorf("decodeList(\"[]\") makes %v allocations, want none", n)
	}
	// A list of host keys: one allocation (the slice), not the JSON decoder's.
	if n := testing.AllocsPerRun(100, func() { _, _ = decodeList(`["ssh-ed25519 AAAA","ssh-rsa BBBB"]`) }); n > 1 {
		t.Errorf("decoding a plain list makes %v allocations, want 1", n)
	}
}
