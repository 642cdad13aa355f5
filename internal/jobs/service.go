package jobs

import (
	"net"
	"strconv"
	"time"

	"github.com/sshapi/sshapi/internal/sshpool"
)

// Config is the jobs section of the service's configuration.
type Config struct {
	// PollInterval is the least time between two squeue runs for one credential (default 1s):
	// every watcher and reader of that credential's jobs shares them.
	PollInterval time.Duration `yaml:"poll_interval" env:"POLL_INTERVAL"`
	// MaxWatchersPerCredential bounds the open waits, event streams and follows of one
	// credential (default 1000).
	MaxWatchersPerCredential int `yaml:"max_watchers_per_credential" env:"MAX_WATCHERS_PER_CREDENTIAL"`
	// MaxFeedsPerOwner bounds one user's credentials whose jobs are polled at once (default
	// 64): one squeue each per PollInterval.
	MaxFeedsPerOwner int `yaml:"max_feeds_per_owner" env:"MAX_FEEDS_PER_OWNER"`
	// MaxWatchersPerOwner bounds one user's open waits, event streams and follows over all of
	// the user's credentials (default 1000).
	MaxWatchersPerOwner int `yaml:"max_watchers_per_owner" env:"MAX_WATCHERS_PER_OWNER"`
	// MaxWait bounds a long poll's timeout (default 5m).
	MaxWait time.Duration `yaml:"max_wait" env:"MAX_WAIT"`
	// Scheduler is how every system's scheduler is reached unless Hosts says otherwise.
	Scheduler Scheduler `yaml:"scheduler" envPrefix:"SCHEDULER_"`
	// Hosts are per-system settings by the system's "host" or "host:port".
	Hosts map[string]Scheduler `yaml:"hosts"`
}

// Service holds the jobs layer's shared state: the poller and the per-system settings.
// Start and Stop own the poller's goroutines.
type Service struct {
	cfg    Config
	Poller *Poller[sshpool.Key]
}

// New builds a Service; call Start before use.
func New(cfg Config) *Service {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 5 * time.Minute
	}
	return &Service{cfg: cfg, Poller: NewPoller[sshpool.Key](PollerConfig{Interval: cfg.PollInterval,
		MaxWatchersPerKey: cfg.MaxWatchersPerCredential, MaxKeysPerOwner: cfg.MaxFeedsPerOwner, MaxWatchersPerOwner: cfg.MaxWatchersPerOwner})}
}

// Start starts the poller.
func (s *Service) Start() { s.Poller.Start() }

// Stop stops the poller and waits for its goroutines.
func (s *Service) Stop() { s.Poller.Stop() }

// MaxWait bounds a long poll.
func (s *Service) MaxWait() time.Duration { return s.cfg.MaxWait }

// SchedulerFor returns the scheduler settings of a system at host:port.
func (s *Service) SchedulerFor(host string, port int) Scheduler {
	if sc, ok := s.cfg.Hosts[net.JoinHostPort(host, strconv.Itoa(port))]; ok {
		return sc
	}
	if sc, ok := s.cfg.Hosts[host]; ok {
		return sc
	}
	return s.cfg.Scheduler
}
