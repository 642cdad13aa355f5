// Package forwarded decides which client address and scheme to believe when sshapi sits behind
// reverse proxies. X-Forwarded-For and X-Forwarded-Proto count only when the direct peer is a
// configured trusted proxy; from anyone else they are dropped before any handler sees them, so
// the client address in logs cannot be forged.
package forwarded

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// dropped are the headers removed from every request once their meaning has been taken.
var dropped = []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-Ip", "Forwarded"}

// Trusted is a set of proxy addresses whose forwarding headers are believed.
type Trusted struct {
	prefixes []netip.Prefix
}

// Parse reads addresses and CIDRs ("10.0.0.0/8", "192.0.2.7", "::1"). An empty list trusts no
// proxy.
func Parse(list []string) (*Trusted, error) {
	t := &Trusted{prefixes: make([]netip.Prefix, 0, len(list))}
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			if p.Addr().Is4In6() {
				return nil, fmt.Errorf("%q: write IPv4 networks in dotted form", s)
			}
			t.prefixes = append(t.prefixes, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR", s)
		}
		a = a.Unmap()
		t.prefixes = append(t.prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	return t, nil
}

// Contains reports whether a is a trusted proxy.
func (t *Trusted) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

type schemeKey struct{}

// Scheme returns the scheme the client used, "https" or "http", as decided by Handler; without
// Handler it is read from the connection.
func Scheme(r *http.Request) string {
	if s, ok := r.Context().Value(schemeKey{}).(string); ok {
		return s
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// Handler sets r.RemoteAddr to the client's address and records the client's scheme (see
// Scheme). When the direct peer is trusted, the client is the right-most X-Forwarded-For entry
// that is not itself a trusted proxy, and the scheme is the last X-Forwarded-Proto value.
// Forwarding headers are removed from every request.
func (t *Trusted) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && t.Contains(peer.Addr()) {
			if client, ok := t.client(r.Header.Values("X-Forwarded-For")); ok {
				r.RemoteAddr = netip.AddrPortFrom(client, 0).String()
			}
			if p := lastValue(r.Header.Values("X-Forwarded-Proto")); p == "https" || p == "http" {
				scheme = p
			}
		}
		for _, h := range dropped {
			r.Header.Del(h)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), schemeKey{}, scheme)))
	})
}

// client walks the X-Forwarded-For hops from the right (the hop nearest to this server) and
// returns the first one that is not a trusted proxy. Entries left of an unparsable one are not
// believed: the last good hop is the client then.
func (t *Trusted) client(values []string) (netip.Addr, bool) {
	var hops []string
	for _, v := range values {
		hops = append(hops, strings.Split(v, ",")...)
	}
	var client netip.Addr
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(strings.TrimSpace(hops[i]))
		if !ok {
			break
		}
		client = a
		if !t.Contains(a) {
			break
		}
	}
	return client, client.IsValid()
}

// parseHop reads "192.0.2.1", "2001:db8::1", "[2001:db8::1]:443" or "192.0.2.1:443".
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

func lastValue(values []string) string {
	if len(values) == 0 {
		return ""
	}
	v := values[len(values)-1]
	if i := strings.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return strings.ToLower(strings.TrimSpace(v))
}
