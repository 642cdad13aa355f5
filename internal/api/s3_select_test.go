package api

import "testing"

// TestS3RefusesSortAndSelection: an S3 system lists in key order only and downloads one prefix
// at a time, so sort/order other than name ascending and archive selections are a 400 naming the
// parameter, while name order is served.
func TestS3RefusesSortAndSelection(t *testing.T) {
	e := newS3Env(t)
	e.putObject("d/a.txt", "a")
	tests := []struct {
		url    string
		status int
		field  string
	}{
		{"/v1/systems/bkt/ls/d?sort=name&order=asc", 200, ""},
		{"/v1/systems/bkt/ls/d?sort=size", 400, "sort"},
		{"/v1/systems/bkt/ls/d?order=desc", 400, "sort"},
		{"/v1/systems/bkt/ls/d?sort=bogus", 400, "sort"},
		{"/v1/systems/bkt/content/d?archive=tar.gz&name=a.txt", 400, "name"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			r := e.do("alice", "GET", tc.url, nil)
			if r.status != tc.status {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if tc.field != "" && problemField(t, r) != tc.field {
				t.Fatalf("problem does not name %s: %s", tc.field, r.body)
			}
		})
	}
}
