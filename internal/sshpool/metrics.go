package sshpool

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	dials           *prometheus.CounterVec
	openRetries     prometheus.Counter
	acquireTimeouts prometheus.Counter
	acquireWait     prometheus.Histogram
	shellRuns       *prometheus.CounterVec
}

// Stats is a snapshot of the pool's state.
type Stats struct {
	Keys, Conns, ChannelsInUse, SFTPBorrowers, Waiters, Dialing int
	// Tunnels are direct-tcpip channels carrying connections to systems behind a jump host.
	Tunnels int
	// IdleSFTP are dedicated SFTP channels kept open for the next download or upload.
	IdleSFTP int
	// Shells are the connections' shared shells (shell.go), each one channel in use; ShellQueued
	// the commands queued on them.
	Shells, ShellQueued int
}

// Stats returns the pool's current state.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s Stats
	s.Keys = len(p.keys)
	for _, kp := range p.keys {
		s.Conns += len(kp.conns)
		s.Waiters += len(kp.waiters)
		s.Dialing += kp.dialing
		for _, c := range kp.conns {
			s.ChannelsInUse += c.inUse
			s.Tunnels += c.tunnels
			s.SFTPBorrowers += c.sftpUse
			s.IdleSFTP += len(c.idle)
			if c.sftp != nil {
				s.ChannelsInUse++
			}
			if c.shell != nil {
				s.Shells++
				s.ShellQueued += c.shell.queued
				s.ChannelsInUse++
			}
		}
	}
	return s
}

// newMetrics registers the pool's metrics with reg (nil: not exported).
func newMetrics(p *Pool, reg prometheus.Registerer) *metrics {
	m := &metrics{
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sshapi_ssh_dials_total",
			Help: "SSH connection attempts by result (ok, refused, failed, auth_failed, host_key_mismatch, denied).",
		}, []string{"result"}),
		openRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sshapi_ssh_channel_open_retries_total",
			Help: "Channel opens retried because the server refused them (MaxSessions) or the connection died.",
		}),
		acquireTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sshapi_ssh_acquire_timeouts_total",
			Help: "Requests that found no SSH channel before their deadline.",
		}),
		acquireWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sshapi_ssh_acquire_wait_seconds",
			Help:    "Time requests waited for an SSH channel slot.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		shellRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sshapi_ssh_shell_commands_total",
			Help: "Short read-only commands offered to the connections' shared shells, by result (ran; busy: no shell free, run in a session instead; lost: the shell ended under it; abandoned: its caller gave up and the shell was killed).",
		}, []string{"result"}),
	}
	for _, r := range []string{"ok", "refused", "failed", "auth_failed", "host_key_mismatch"} {
		m.dials.WithLabelValues(r)
	}
	for _, r := range []string{"ran", "busy", "lost", "abandoned"} {
		m.shellRuns.WithLabelValues(r)
	}
	if reg == nil {
		return m
	}
	gauge := func(name, help string, f func(Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f(p.Stats())) })
	}
	reg.MustRegister(m.dials, m.openRetries, m.acquireTimeouts, m.acquireWait, m.shellRuns,
		gauge("sshapi_ssh_connections", "Open pooled SSH connections.", func(s Stats) int { return s.Conns }),
		gauge("sshapi_ssh_channels_in_use", "SSH channels open (exec, dedicated SFTP and shared SFTP).", func(s Stats) int { return s.ChannelsInUse }),
		gauge("sshapi_ssh_sftp_borrowers", "Operations using a shared SFTP channel right now.", func(s Stats) int { return s.SFTPBorrowers }),
		gauge("sshapi_ssh_waiters", "Requests queued for an SSH channel.", func(s Stats) int { return s.Waiters }),
		gauge("sshapi_ssh_shells", "Shared shells open (one channel each).", func(s Stats) int { return s.Shells }),
		gauge("sshapi_ssh_dials_in_flight", "Connections being dialed.", func(s Stats) int { return s.Dialing }),
	)
	return m
}
