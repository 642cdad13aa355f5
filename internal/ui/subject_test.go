package ui

import (
	"strings"
	"testing"
)

// TestPrincipalFromClaimsSubject: the web UI takes a user from an ID token's subject under the
// bearer tokens' rules (auth.SubjectProblem): a subject naming a share link ("link:…"), empty,
// too long or with control characters is refused, a URL (CILogon's subjects) is a user.
func TestPrincipalFromClaimsSubject(t *testing.T) {
	s := &Server{deps: Deps{GroupsClaim: "groups"}}
	for _, tc := range []struct {
		sub string
		ok  bool
	}{
		{"alice", true},
		{"http://cilogon.org/serverE/users/1", true},
		{"link:l_abc", false},
		{"", false},
		{strings.Repeat("a", 257), false},
		{"al\nice", false},
	} {
		p, err := s.principalFromClaims(tc.sub, map[string]any{"groups": []any{"proj42"}})
		if tc.ok != (err == nil) || tc.ok && (p.User != tc.sub || len(p.Groups) != 1) {
			t.Errorf("subject %q: %+v, %v; want ok %v", tc.sub, p, err, tc.ok)
		}
	}
}
