package forwarded

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHandler(t *testing.T) {
	trusted, err := Parse([]string{"10.0.0.0/8", "192.0.2.7", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		peer       string
		tls        bool
		xff, proto []string
		wantAddr   string
		wantScheme string
	}{
		{name: "untrusted peer: headers ignored", peer: "203.0.113.9:5000", xff: []string{"198.51.100.1"}, proto: []string{"https"}, wantAddr: "203.0.113.9:5000", wantScheme: "http"},
		{name: "untrusted peer over TLS", peer: "203.0.113.9:5000", tls: true, proto: []string{"http"}, wantAddr: "203.0.113.9:5000", wantScheme: "https"},
		{name: "trusted peer: client from XFF", peer: "10.1.2.3:443", xff: []string{"198.51.100.1"}, proto: []string{"https"}, wantAddr: "198.51.100.1:0", wantScheme: "https"},
		{name: "client forges a hop left of the real one", peer: "10.1.2.3:443", xff: []string{"1.1.1.1, 198.51.100.1"}, wantAddr: "198.51.100.1:0", wantScheme: "http"},
		{name: "chain of trusted proxies", peer: "10.1.2.3:443", xff: []string{"198.51.100.1, 192.0.2.7", "10.9.9.9"}, wantAddr: "198.51.100.1:0", wantScheme: "http"},
		{name: "garbage hop stops the walk", peer: "10.1.2.3:443", xff: []string{"198.51.100.1, junk, 10.9.9.9"}, wantAddr: "10.9.9.9:0", wantScheme: "http"},
		{name: "hop with port", peer: "[::1]:443", xff: []string{"[2001:db8::5]:1234"}, wantAddr: "[2001:db8::5]:0", wantScheme: "http"},
		{name: "last proto wins, unknown ignored", peer: "10.1.2.3:443", proto: []string{"http", "gopher"}, wantAddr: "10.1.2.3:443", wantScheme: "http"},
		{name: "trusted peer without XFF", peer: "192.0.2.7:80", proto: []string{"HTTPS"}, wantAddr: "192.0.2.7:80", wantScheme: "https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotAddr, gotScheme string
			var leaked []string
			h := trusted.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotAddr, gotScheme = r.RemoteAddr, Scheme(r)
				for _, name := range dropped {
					if r.Header.Get(name) != "" {
						leaked = append(leaked, name)
					}
				}
			}))
			r := httptest.NewRequest("GET", "/x", nil)
			r.RemoteAddr = tt.peer
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range tt.proto {
				r.Header.Add("X-Forwarded-Proto", v)
			}
			r.Header.Set("Forwarded", "for=6.6.6.6")
			h.ServeHTTP(httptest.NewRecorder(), r)
			if gotAddr != tt.wantAddr || gotScheme != tt.wantScheme {
				t.Errorf("client %s %s, want %s %s", gotAddr, gotScheme, tt.wantAddr, tt.wantScheme)
			}
			if len(leaked) > 0 {
				t.Errorf("forwarding headers reached the handler: %v", leaked)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{"10.0.0.0/33", "example.com", "10.0.0.0/8/1", ""} {
		if _, err := Parse([]string{s}); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}
