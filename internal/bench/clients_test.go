package bench

import (
	"encoding/json"
	"testing"
)

// TestListedNames: the ls client's check finds each wanted name as a "name" member's whole
// value, and only there: not as a prefix of a longer name, not inside another string, not as
// another member's value.
func TestListedNames(t *testing.T) {
	want := map[string]int{}
	for i, n := range []string{"f1", "f2", `a"b`} {
		q, _ := json.Marshal(n)
		want[string(q)] = i
	}
	for _, tc := range []struct {
		name, body string
		missing    int
	}{
		{"all", `{"entries":[{"name":"f1","size":0},{"name":"f2"},{"name":"a\"b"}]}`, -1},
		{"order does not matter", `{"entries":[{"name":"a\"b"},{"name":"f2"},{"name":"f1"}]}`, -1},
		{"one missing", `{"entries":[{"name":"f1"},{"name":"a\"b"}]}`, 1},
		{"a longer name is not the name", `{"entries":[{"name":"f10"},{"name":"f2"},{"name":"a\"b"}]}`, 0},
		{"inside another string", `{"path":"x\"name\":\"f1\"","entries":[{"name":"f2"},{"name":"a\"b"}]}`, 0},
		{"another member's value", `{"entries":[{"path":"f1"},{"name":"f2"},{"name":"a\"b"}]}`, 0},
		{"none", `{"entries":[]}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.body)) {
				t.Fatalf("test body is not JSON: %s", tc.body)
			}
			if got := listedNames([]byte(tc.body), want); got != tc.missing {
				t.Fatalf("listedNames = %d, want %d", got, tc.missing)
			}
		})
	}
}
