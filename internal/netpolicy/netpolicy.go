// Package netpolicy decides which network addresses sshapi may open SSH connections to, so that a
// user registering a system cannot point the service at cloud metadata endpoints, link-local
// services or (unless the operator allows it) the service host's own loopback.
//
// The decision is made on the IP address actually dialed, from a net.Dialer Control function, so
// a host name that resolves to a denied address (DNS rebinding included) is refused at connect
// time. Host names can also be refused by pattern before they are resolved.
package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path"
	"strings"
	"syscall"
)

// ErrDenied is wrapped by every refusal.
var ErrDenied = errors.New("network policy denies the address")

// Config is the operator's policy. The zero value denies loopback, link-local (including cloud
// metadata), multicast and unspecified addresses and allows everything else.
type Config struct {
	// AllowCIDRs, if not empty, is an allowlist: only addresses inside one of these prefixes may
	// be dialed. A prefix lying entirely inside an always-denied range (e.g. 169.254.10.0/24 or
	// 127.0.0.1/32) lifts that denial for its own addresses.
	AllowCIDRs []string `yaml:"allow_cidrs" env:"ALLOW_CIDRS"`
	// DenyCIDRs are refused whatever else says.
	DenyCIDRs []string `yaml:"deny_cidrs" env:"DENY_CIDRS"`
	// DenyHosts are host name patterns (path.Match syntax, case-insensitive, e.g.
	// "*.internal", "metadata.google.internal") refused before resolution.
	DenyHosts []string `yaml:"deny_hosts" env:"DENY_HOSTS"`
	// AllowLoopback allows 127.0.0.0/8 and ::1.
	AllowLoopback bool `yaml:"allow_loopback" env:"ALLOW_LOOPBACK"`
}

// builtin are the ranges refused unless explicitly allowed by a narrower AllowCIDRs entry.
var builtin = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata endpoint"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata endpoint"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Policy is a parsed Config. A nil *Policy allows everything.
type Policy struct {
	allow, deny   []netip.Prefix
	denyHosts     []string
	allowLoopback bool
}

// New parses cfg, naming the first invalid entry.
func New(cfg Config) (*Policy, error) {
	p := &Policy{allowLoopback: cfg.AllowLoopback}
	parse := func(field string, in []string) ([]netip.Prefix, error) {
		out := make([]netip.Prefix, 0, len(in))
		for _, s := range in {
			s = strings.TrimSpace(s)
			pf, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return nil, fmt.Errorf("network.%s: %q is not a CIDR prefix or IP address", field, s)
				}
				pf = netip.PrefixFrom(a, a.BitLen())
			}
			out = append(out, unmapPrefix(pf.Masked()))
		}
		return out, nil
	}
	var err error
	if p.allow, err = parse("allow_cidrs", cfg.AllowCIDRs); err != nil {
		return nil, err
	}
	if p.deny, err = parse("deny_cidrs", cfg.DenyCIDRs); err != nil {
		return nil, err
	}
	for _, h := range cfg.DenyHosts {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
		if _, err := path.Match(h, ""); err != nil {
			return nil, fmt.Errorf("network.deny_hosts: %q is not a valid pattern: %w", h, err)
		}
		p.denyHosts = append(p.denyHosts, h)
	}
	return p, nil
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() {
		bits := p.Bits() - 96
		if bits < 0 {
			bits = 0
		}
		return netip.PrefixFrom(p.Addr().Unmap(), bits).Masked()
	}
	return p
}

// CheckIP reports, wrapping ErrDenied, why ip may not be dialed.
func (p *Policy) CheckIP(ip netip.Addr) error {
	if p == nil {
		return nil
	}
	ip = ip.Unmap().WithZone("")
	for _, d := range p.deny {
		if d.Contains(ip) {
			return fmt.Errorf("%w: %s is inside network.deny_cidrs %s", ErrDenied, ip, d)
		}
	}
	isLoop := false
	for _, l := range loopback {
		if l.Contains(ip) {
			isLoop = true
			if !p.allowLoopback && !p.lifted(l, ip) {
				return fmt.Errorf("%w: %s is a loopback address (set network.allow_loopback to allow it)", ErrDenied, ip)
			}
		}
	}
	for _, b := range builtin {
		if b.prefix.Contains(ip) && !p.lifted(b.prefix, ip) {
			return fmt.Errorf("%w: %s is a %s address", ErrDenied, ip, b.why)
		}
	}
	if len(p.allow) == 0 || (isLoop && p.allowLoopback) {
		return nil
	}
	for _, a := range p.allow {
		if a.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is not inside network.allow_cidrs", ErrDenied, ip)
}

// lifted reports whether an AllowCIDRs entry inside the denied range contains ip.
func (p *Policy) lifted(denied netip.Prefix, ip netip.Addr) bool {
	for _, a := range p.allow {
		if a.Contains(ip) && a.Bits() >= denied.Bits() && denied.Contains(a.Addr()) {
			return true
		}
	}
	return false
}

// CheckHost refuses a host name matching DenyHosts, and a literal IP address that CheckIP
// refuses. Other names pass: they are checked on the addresses they resolve to, at dial time.
func (p *Policy) CheckHost(host string) error {
	if p == nil {
		return nil
	}
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(h); err == nil {
		return p.CheckIP(ip)
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	for _, pat := range p.denyHosts {
		if ok, _ := path.Match(pat, name); ok {
			return fmt.Errorf("%w: host %q matches network.deny_hosts %q", ErrDenied, host, pat)
		}
	}
	return nil
}

// Control is a net.Dialer Control function that refuses denied addresses after resolution and
// before the connection is attempted.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialed address %q: %w", ErrDenied, address, err)
	}
	return p.CheckIP(ap.Addr())
}

// DialContext connects like net.Dialer.DialContext after refusing a denied host name, and refuses
// every resolved address the policy denies before connecting to it. A nil *Policy only dials.
func (p *Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	if p != nil {
		if host, _, err := net.SplitHostPort(address); err == nil {
			if err := p.CheckHost(host); err != nil {
				return nil, err
			}
		}
		d.Control = p.Control
	}
	return d.DialContext(ctx, network, address)
}
