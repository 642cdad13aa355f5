package cli

import (
	"strings"
	"testing"
)

// TestBenchFlagErrors: the bench commands refuse bad channel counts, listing sizes and flag
// combinations before they start anything.
func TestBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "transfer", "--channels", "0"}, "--channels"},
		{[]string{"bench", "transfer", "--channels", "1,x"}, "--channels"},
		{[]string{"bench", "transfer", "--channels", "1,2", "--url", "http://127.0.0.1:9"}, "self-hosted"},
		{[]string{"bench", "transfer", "--channels", "1", "--ciphers", "aes128-ctr"}, "give one"},
		{[]string{"bench", "paper", "--channels", "65"}, "--channels"},
		{[]string{"bench", "paper", "--cipher-size", "lots"}, "--cipher-size"},
		{[]string{"bench", "paper", "--clients-peers", "firecrest"}, "--clients-peers"},
		{[]string{"bench", "paper", "--clients-duration", "0s"}, "--clients-duration"},
		{[]string{"bench", "listing", "--entries", "0"}, "--entries"},
		{[]string{"bench", "listing", "--entries", "100001"}, "--entries"},
		{[]string{"bench", "listing", "--concurrency", "0"}, "--concurrency"},
		{[]string{"bench", "listing", "--concurrency", ""}, "--concurrency"},
		{[]string{"bench", "listing", "--url", "http://127.0.0.1:9", "--token", "t", "--system", "s"}, "--dir"},
		{[]string{"bench", "listing", "--url", "http://127.0.0.1:9", "--token", "t", "--dir", "/tmp"}, "--system"},
	} {
		code, _, errOut := sshapi(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("sshapi %s: exit %d, stderr %q; want an error naming %s", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
}
