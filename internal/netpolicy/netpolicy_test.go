package netpolicy

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"
)

func TestCheckIP(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ip   string
		ok   bool
	}{
		{"public v4 by default", Config{}, "192.0.2.10", true},
		{"private v4 by default", Config{}, "10.1.2.3", true},
		{"public v6 by default", Config{}, "2001:db8::1", true},
		{"loopback denied by default", Config{}, "127.0.0.1", false},
		{"loopback 127/8 denied by default", Config{}, "127.3.4.5", false},
		{"loopback v6 denied by default", Config{}, "::1", false},
		{"loopback v4-mapped denied", Config{}, "::ffff:127.0.0.1", false},
		{"loopback allowed by flag", Config{AllowLoopback: true}, "127.0.0.1", true},
		{"loopback v6 allowed by flag", Config{AllowLoopback: true}, "::1", true},
		{"loopback lifted by narrow allow", Config{AllowCIDRs: []string{"127.0.0.1/32"}}, "127.0.0.1", true},
		{"other loopback not lifted", Config{AllowCIDRs: []string{"127.0.0.1/32"}}, "127.0.0.2", false},
		{"metadata", Config{AllowLoopback: true}, "169.254.169.254", false},
		{"metadata v4-mapped", Config{}, "::ffff:169.254.169.254", false},
		{"metadata v6", Config{}, "fd00:ec2::254", false},
		{"link-local v4", Config{}, "169.254.1.1", false},
		{"link-local v6", Config{}, "fe80::1", false},
		{"link-local v6 with zone", Config{}, "fe80::1%eth0", false},
		{"multicast v4", Config{}, "224.0.0.251", false},
		{"multicast v6", Config{}, "ff02::1", false},
		{"unspecified v4", Config{}, "0.0.0.0", false},
		{"unspecified v6", Config{}, "::", false},
		{"broadcast", Config{}, "255.255.255.255", false},
		{"wide allow does not lift metadata", Config{AllowCIDRs: []string{"0.0.0.0/0"}}, "169.254.169.254", false},
		{"narrow allow lifts link-local", Config{AllowCIDRs: []string{"169.254.10.0/24"}}, "169.254.10.7", true},
		{"narrow link-local allow does not lift metadata", Config{AllowCIDRs: []string{"169.254.0.0/16"}}, "169.254.169.254", false},
		{"allowlist admits inside", Config{AllowCIDRs: []string{"10.0.0.0/8"}}, "10.9.9.9", true},
		{"allowlist refuses outside", Config{AllowCIDRs: []string{"10.0.0.0/8"}}, "192.0.2.1", false},
		{"allowlist plus loopback flag", Config{AllowCIDRs: []string{"10.0.0.0/8"}, AllowLoopback: true}, "127.0.0.1", true},
		{"deny beats allow", Config{AllowCIDRs: []string{"10.0.0.0/8"}, DenyCIDRs: []string{"10.1.0.0/16"}}, "10.1.2.3", false},
		{"deny beats loopback flag", Config{AllowLoopback: true, DenyCIDRs: []string{"127.0.0.1"}}, "127.0.0.1", false},
		{"deny v6", Config{DenyCIDRs: []string{"2001:db8::/32"}}, "2001:db8::5", false},
		{"deny mapped prefix applies to v4", Config{DenyCIDRs: []string{"::ffff:192.0.2.0/120"}}, "192.0.2.9", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = p.CheckIP(netip.MustParseAddr(tt.ip))
			if tt.ok && err != nil {
				t.Fatalf("CheckIP(%s) = %v, want allowed", tt.ip, err)
			}
			if !tt.ok && !errors.Is(err, ErrDenied) {
				t.Fatalf("CheckIP(%s) = %v, want ErrDenied", tt.ip, err)
			}
		})
	}
}

func TestCheckHost(t *testing.T) {
	p, err := New(Config{DenyHosts: []string{"*.internal", "Metadata.Google.Internal."}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		ok   bool
	}{
		{"login.hpc.example.org", true},
		{"metadata.google.internal", false},
		{"METADATA.google.internal.", false},
		{"foo.internal", false},
		{"internal", true},
		{"169.254.169.254", false},
		{"[fe80::1]", false},
		{"192.0.2.4", true},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		err := p.CheckHost(tt.host)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrDenied)) {
			t.Errorf("CheckHost(%q) = %v, want ok=%v", tt.host, err, tt.ok)
		}
	}
	var nilPolicy *Policy
	if err := nilPolicy.CheckHost("127.0.0.1"); err != nil {
		t.Errorf("nil policy refused: %v", err)
	}
}

func TestNewRejectsBadEntries(t *testing.T) {
	for _, cfg := range []Config{
		{AllowCIDRs: []string{"10.0.0.0/33"}},
		{DenyCIDRs: []string{"not-an-ip"}},
		{DenyHosts: []string{"[bad"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted an invalid entry", cfg)
		}
	}
}

// TestDialRefusesResolvedAddress dials a real listener: the policy must refuse the connection
// on the resolved address (a name, "localhost", that is not itself a literal IP) before any
// packet is sent, and allow it when loopback is allowed.
func TestDialRefusesResolvedAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	addr := net.JoinHostPort("localhost", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	deny, _ := New(Config{})
	if _, err := deny.DialContext(t.Context(), "tcp4", addr); !errors.Is(err, ErrDenied) {
		t.Fatalf("dial %s under the default policy: %v, want ErrDenied", addr, err)
	}
	allow, _ := New(Config{AllowLoopback: true})
	c, err := allow.DialContext(t.Context(), "tcp4", addr)
	if err != nil {
		t.Fatalf("dial %s with loopback allowed: %v", addr, err)
	}
	c.Close()
	<-accepted
	if len(accepted) != 0 {
		t.Fatalf("the denied dial reached the listener")
	}
}
