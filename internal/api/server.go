package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/jobs"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/slot"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/store"
)

// Config holds the HTTP layer's settings.
type Config struct {
	// PublicURL is the service's address as its clients reach it ("https://hpc-api.example" or
	// with a path prefix, "https://gw.example/sshapi"): the base of the URLs it hands out (a
	// link's url). When it is unset the service's listen address is used; the request's Host
	// header never is.
	PublicURL string `yaml:"public_url" env:"PUBLIC_URL"`
	// MaxBodyBytes caps JSON request bodies (default 1 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes" env:"MAX_BODY_BYTES"`
	// MaxFanout caps how many systems one POST /v1/commands runs on at once (default 32).
	MaxFanout int `yaml:"max_fanout" env:"MAX_FANOUT"`
	// MaxKDFRounds caps the bcrypt KDF rounds of a submitted encrypted OpenSSH key (default 128).
	MaxKDFRounds int `yaml:"max_kdf_rounds" env:"MAX_KDF_ROUNDS"`
	// KeyParseSlots bounds how many submitted private keys are parsed or decrypted at once,
	// server-wide (default 2).
	KeyParseSlots int `yaml:"key_parse_slots" env:"KEY_PARSE_SLOTS"`
	// KeyParseSlotsPerOwner is one user's share of KeyParseSlots (default 1): a user's further
	// keys wait for that user's own slot, so they never hold the others.
	KeyParseSlotsPerOwner int `yaml:"key_parse_slots_per_owner" env:"KEY_PARSE_SLOTS_PER_OWNER"`
	// KeyParseWait bounds the wait for a key parsing slot before 503 (default 5s).
	KeyParseWait time.Duration `yaml:"key_parse_wait" env:"KEY_PARSE_WAIT"`
	// OwnerLimits are each user's shares (see limits.go).
	OwnerLimits `yaml:",inline"`
	// CommandOutputBudgetBytes is the memory all buffered (non-NDJSON) command outputs may hold
	// at once, server-wide (default 128 MiB). A buffered command reserves twice its
	// max_output_bytes (stdout and stderr) before it starts.
	CommandOutputBudgetBytes int64 `yaml:"command_output_budget_bytes" env:"COMMAND_OUTPUT_BUDGET_BYTES"`
	// CommandOutputBudgetPerOwnerBytes is one user's share of CommandOutputBudgetBytes (default
	// half of it): one user's buffered commands, however long they run, never hold the whole
	// budget, so the other users' still start.
	CommandOutputBudgetPerOwnerBytes int64 `yaml:"command_output_budget_per_owner_bytes" env:"COMMAND_OUTPUT_BUDGET_PER_OWNER_BYTES"`
	// CommandMaxOutputBytes caps max_output_bytes of one request (default 32 MiB; at most half
	// a user's share of the budget).
	CommandMaxOutputBytes int64 `yaml:"command_max_output_bytes" env:"COMMAND_MAX_OUTPUT_BYTES"`
	// BudgetWait bounds how long a request waits for output budget or a download buffer
	// before it is answered 503 with Retry-After (default 30s; the request's own deadline, if
	// shorter, wins).
	BudgetWait time.Duration `yaml:"budget_wait" env:"BUDGET_WAIT"`
	// StreamWriteTimeout ends a streamed response (NDJSON, download, archive) whose client
	// accepted no bytes for this long, releasing its SSH channel (default 60s).
	StreamWriteTimeout time.Duration `yaml:"stream_write_timeout" env:"STREAM_WRITE_TIMEOUT"`
	// UploadIdleTimeout aborts an upload whose body delivered no bytes for this long; nothing
	// is left behind (default 60s).
	UploadIdleTimeout time.Duration `yaml:"upload_idle_timeout" env:"UPLOAD_IDLE_TIMEOUT"`
	// MinBodyRate is the slowest a request body (JSON or upload) may arrive, in bytes/s, over
	// MinBodyRateWindow of waiting for it, after MinBodyRateGrace (default 1024, 1m, 10s); a
	// slower body is cut off with 408 (an upload leaves nothing). Time the server spends not
	// reading (an upload waiting on its SFTP server) does not count. Negative disables it.
	MinBodyRate       int64         `yaml:"min_body_rate" env:"MIN_BODY_RATE"`
	MinBodyRateWindow time.Duration `yaml:"min_body_rate_window" env:"MIN_BODY_RATE_WINDOW"`
	MinBodyRateGrace  time.Duration `yaml:"min_body_rate_grace" env:"MIN_BODY_RATE_GRACE"`
	// DownloadBufferBytes is each file download's read-ahead buffer (default 1 MiB).
	DownloadBufferBytes int `yaml:"download_buffer_bytes" env:"DOWNLOAD_BUFFER_BYTES"`
	// DownloadBufferBudgetBytes is the memory all download buffers may hold at once; further
	// downloads wait for a buffer (default 64 MiB, i.e. 64 concurrent downloads).
	DownloadBufferBudgetBytes int64 `yaml:"download_buffer_budget_bytes" env:"DOWNLOAD_BUFFER_BUDGET_BYTES"`
	// DownloadBufferBudgetPerOwnerBytes is one user's share of DownloadBufferBudgetBytes
	// (default half of it): a user's further downloads wait for that user's own buffers.
	DownloadBufferBudgetPerOwnerBytes int64 `yaml:"download_buffer_budget_per_owner_bytes" env:"DOWNLOAD_BUFFER_BUDGET_PER_OWNER_BYTES"`
	// StripeMinBytes: a download or upload (by Content-Length) at least this large is striped
	// over several SFTP channels when the measured RTT calls for more than one (default 16 MiB).
	// Its chunk buffers (two per channel, DownloadBufferBytes each) come from the download
	// budget, as far as it has room; otherwise the transfer uses one channel.
	StripeMinBytes int64 `yaml:"stripe_min_bytes" env:"STRIPE_MIN_BYTES"`
	// StripeMaxChannels caps the SFTP channels of one striped download or upload (default 8;
	// 1 disables striping).
	StripeMaxChannels int `yaml:"stripe_max_channels" env:"STRIPE_MAX_CHANNELS"`
	// StripeLinkRate is the bandwidth in bytes/s assumed when choosing the channel count from
	// the RTT: channels = StripeLinkRate × RTT / 2 MiB (default 1.25e9, 10 Gbit/s).
	StripeLinkRate float64 `yaml:"stripe_link_rate" env:"STRIPE_LINK_RATE"`
	// StripeMinRTT: below this measured round-trip time transfers are never striped (default
	// 5ms: one 2 MiB window per 5 ms already carries 3.3 Gbit/s).
	StripeMinRTT time.Duration `yaml:"stripe_min_rtt" env:"STRIPE_MIN_RTT"`
	// ListMaxWindow caps offset+limit of a directory listing, the entries one listing holds
	// (default 100000); deeper pages use after= (keyset paging).
	ListMaxWindow int `yaml:"list_max_window" env:"LIST_MAX_WINDOW"`
	// ListStreamDirBytes: directories the server reports larger than this are read batch by
	// batch over a channel of their own instead of whole (default 65536; -1 streams all).
	ListStreamDirBytes int64 `yaml:"list_stream_dir_bytes" env:"LIST_STREAM_DIR_BYTES"`
	// ListSFTPOnly lists large directories (see ListStreamDirBytes) with SFTP READDIRs only;
	// by default one `find -printf` on the server lists them, falling back to SFTP where GNU
	// find is missing.
	ListSFTPOnly bool `yaml:"list_sftp_only" env:"LIST_SFTP_ONLY"`
	// ListSnapshotBytes is the memory kept listings of large directories may hold, so their
	// next pages and other orders need no new listing (default 128 MiB; -1 keeps none);
	// ListSnapshotBytesPerOwner one system owner's share of it (default a quarter) and
	// ListSnapshotTTL how long one is served at most (default 15s; see package files,
	// listsnap.go, for what else ends one).
	ListSnapshotBytes         int64         `yaml:"list_snapshot_bytes" env:"LIST_SNAPSHOT_BYTES"`
	ListSnapshotBytesPerOwner int64         `yaml:"list_snapshot_bytes_per_owner" env:"LIST_SNAPSHOT_BYTES_PER_OWNER"`
	ListSnapshotTTL           time.Duration `yaml:"list_snapshot_ttl" env:"LIST_SNAPSHOT_TTL"`
	// TusMaxSize is the largest resumable upload, in bytes (Tus-Max-Size; default 1 TiB).
	TusMaxSize int64 `yaml:"tus_max_size" env:"TUS_MAX_SIZE"`
	// TusMaxOpenPerOwner bounds each user's unfinished resumable uploads (default 100) and
	// TusMaxBytesPerOwner the sum of their lengths (default 4 TiB).
	TusMaxOpenPerOwner  int   `yaml:"tus_max_open_per_owner" env:"TUS_MAX_OPEN_PER_OWNER"`
	TusMaxBytesPerOwner int64 `yaml:"tus_max_bytes_per_owner" env:"TUS_MAX_BYTES_PER_OWNER"`
	// TusExpiry is how long a resumable upload may take from its creation (default 24h); then
	// its part file is swept.
	TusExpiry time.Duration `yaml:"tus_expiry" env:"TUS_EXPIRY"`
	// TusLease is how long an upload's lease outlives the last renewal by the PATCH holding it
	// (default 30s): the PATCH renews it every third of that for as long as it runs, however
	// slowly its body comes, so only a PATCH whose instance died (or lost its database) is
	// taken over, and one that could not renew for two thirds of it stops writing (423).
	TusLease time.Duration `yaml:"tus_lease" env:"TUS_LEASE"`
	// TempLease is how long the record of a temporary name (an upload's part file, an archive
	// being built) outlives the last renewal by the instance writing it (default 1m): a name
	// whose writer died or lost its connection is removed within about this long after
	// (see TempKeeper).
	TempLease time.Duration `yaml:"temp_lease" env:"TEMP_LEASE"`
	// AuditSpoolDir is this instance's audit spool: audit entries the database could not take
	// (it restarts, fails over, is unreachable) are fsynced there and moved into the database
	// once it is back, so the request is answered with its real status (default
	// <data_dir>/audit-spool; "off" disables it). One instance per directory.
	AuditSpoolDir string `yaml:"audit_spool_dir" env:"AUDIT_SPOOL_DIR"`
	// AuditSpoolMax bounds the entries the spool holds (default 100000); when it is full,
	// audited requests are refused with 503 before they run.
	AuditSpoolMax int `yaml:"audit_spool_max" env:"AUDIT_SPOOL_MAX"`
}

// withDefaults fills unset fields with their defaults.
func (c Config) withDefaults() Config {
	setDefault(&c.MaxBodyBytes, 1<<20)
	setDefault(&c.MaxFanout, 32)
	setDefault(&c.CommandOutputBudgetBytes, 128<<20)
	setDefault(&c.CommandOutputBudgetPerOwnerBytes, c.CommandOutputBudgetBytes/2)
	setDefault(&c.CommandMaxOutputBytes, min(command.MaxMaxOutput, c.CommandOutputBudgetPerOwnerBytes/2))
	setDefault(&c.BudgetWait, 30*time.Second)
	setDefault(&c.StreamWriteTimeout, 60*time.Second)
	setDefault(&c.UploadIdleTimeout, 60*time.Second)
	if c.MinBodyRate == 0 {
		c.MinBodyRate = 1024
	}
	setDefault(&c.MinBodyRateWindow, time.Minute)
	setDefault(&c.MinBodyRateGrace, 10*time.Second)
	setDefault(&c.DownloadBufferBytes, 1<<20)
	setDefault(&c.DownloadBufferBudgetBytes, 64<<20)
	setDefault(&c.DownloadBufferBudgetPerOwnerBytes, max(c.DownloadBufferBudgetBytes/2, int64(c.DownloadBufferBytes)))
	setDefault(&c.StripeMinBytes, 16<<20)
	setDefault(&c.StripeMaxChannels, 8)
	setDefault(&c.StripeMinRTT, 5*time.Millisecond)
	if c.StripeLinkRate <= 0 {
		c.StripeLinkRate = 1.25e9
	}
	setDefault(&c.ListMaxWindow, 100_000)
	setDefault(&c.TusMaxSize, 1<<40)
	setDefault(&c.TusMaxOpenPerOwner, 100)
	setDefault(&c.TusMaxBytesPerOwner, 4<<40)
	setDefault(&c.TusExpiry, 24*time.Hour)
	setDefault(&c.TusLease, 30*time.Second)
	setDefault(&c.TempLease, time.Minute)
	setDefault(&c.AuditSpoolMax, 100_000)
	if c.ListStreamDirBytes == 0 {
		c.ListStreamDirBytes = 64 << 10
	}
	if c.ListSnapshotBytes == 0 {
		c.ListSnapshotBytes = 128 << 20
	}
	setDefault(&c.ListSnapshotBytesPerOwner, max(c.ListSnapshotBytes/4, 0))
	setDefault(&c.ListSnapshotTTL, 15*time.Second)
	return c
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// BudgetBytes is the memory the HTTP layer's byte budgets may hold at once with this
// configuration: buffered command output, download (and striped upload) buffers and kept
// directory listings.
func (c Config) BudgetBytes() int64 {
	c = c.withDefaults()
	return c.CommandOutputBudgetBytes + c.DownloadBufferBudgetBytes + max(c.ListSnapshotBytes, 0)
}

// Validate checks limits that contradict each other.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.CommandOutputBudgetPerOwnerBytes > c.CommandOutputBudgetBytes {
		return fmt.Errorf("http: command_output_budget_per_owner_bytes (%d) must not exceed command_output_budget_bytes (%d)", c.CommandOutputBudgetPerOwnerBytes, c.CommandOutputBudgetBytes)
	}
	if 2*c.CommandMaxOutputBytes > c.CommandOutputBudgetPerOwnerBytes {
		return fmt.Errorf("http: command_max_output_bytes (%d) must be at most half of command_output_budget_per_owner_bytes (%d): a buffered command reserves stdout and stderr from its user's share", c.CommandMaxOutputBytes, c.CommandOutputBudgetPerOwnerBytes)
	}
	if int64(c.DownloadBufferBytes) > c.DownloadBufferBudgetBytes {
		return fmt.Errorf("http: download_buffer_bytes (%d) must not exceed download_buffer_budget_bytes (%d)", c.DownloadBufferBytes, c.DownloadBufferBudgetBytes)
	}
	if int64(c.DownloadBufferBytes) > c.DownloadBufferBudgetPerOwnerBytes || c.DownloadBufferBudgetPerOwnerBytes > c.DownloadBufferBudgetBytes {
		return fmt.Errorf("http: download_buffer_budget_per_owner_bytes (%d) must be between download_buffer_bytes (%d) and download_buffer_budget_bytes (%d)", c.DownloadBufferBudgetPerOwnerBytes, c.DownloadBufferBytes, c.DownloadBufferBudgetBytes)
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("http: public_url %q must be an absolute http or https URL without user, query or fragment", c.PublicURL)
		}
	}
	if c.ListMaxWindow > files.MaxRecursiveEntries {
		return fmt.Errorf("http: list_max_window must be at most %d", files.MaxRecursiveEntries)
	}
	return nil
}

// Pool is what the API needs from the SSH connection pool.
type Pool interface {
	command.Sessions
	SFTP(ctx context.Context, t sshpool.Target) (*sshpool.SharedSFTP, error)
	DedicatedSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error)
	StripeSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error)
	Connected(k sshpool.Key) bool
	RTT(k sshpool.Key) (time.Duration, bool)
	Check(ctx context.Context, t sshpool.Target) error
	Forget(system string)
}

// Verifier authenticates bearer tokens.
type Verifier interface {
	Verify(ctx context.Context, token string) (auth.Principal, error)
}

// Deps are the server's collaborators.
type Deps struct {
	Store    store.Store
	Keyring  *secret.Keyring
	Pool     Pool
	Verifier Verifier
	Log      *slog.Logger
	// Registry receives the HTTP metrics; nil means a private registry.
	Registry *prometheus.Registry
	// Gatherer serves /metrics; defaults to Registry.
	Gatherer prometheus.Gatherer
	Version  string
	// Transfers runs /v1/transfers; nil answers those routes with 503.
	Transfers Transfers
	// Jobs runs /v1/systems/{id}/jobs (started by the caller); nil answers those routes with 503.
	Jobs *jobs.Service
	// Network refuses system hosts the operator's network policy denies (nil: none); the pool
	// enforces the same policy when it dials.
	Network *netpolicy.Policy
	// Access decides who may do what on which system; nil builds one from Store, Keyring and
	// Network.
	Access *access.Resolver
	// Sessions authenticates the web interface's session cookies on requests without an
	// Authorization header; nil accepts bearer tokens only.
	Sessions SessionAuthenticator
}

// Server serves the HTTP API.
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	reqDuration *prometheus.HistogramVec

	access  *access.Resolver
	auditTo auditState // where entries the database cannot take go (auditspool.go)

	loads *slot.Pool // POST /sshapi/v2/load runs, with each user's share

	homes homeCache // remote home directories by pool key, so a file request needs no getwd

	tools toolsCache // what checksums learned of each server's openssl, by pool key

	keySlots  *slot.Pool       // submitted private keys being parsed, with each user's share (keyparse.go)
	outputs   *command.Budget  // buffered command output, server-wide with a share per user
	downloads *slot.Pool       // download read-ahead buffers, in bytes, with each user's share
	limits    *limits          // per-owner shares
	temps     *TempKeeper      // records of temporary names being written (temps.go)
	listSnaps *files.Snapshots // kept listings of large directories (nil: none)

	listenURL atomic.Pointer[string] // the base of handed-out URLs when Config.PublicURL is unset
}

// SetListenURL sets the base of the URLs the server hands out (a link's url) when
// Config.PublicURL is unset: the service calls it with the address it listens on
// ("http://127.0.0.1:8080").
func (s *Server) SetListenURL(u string) { s.listenURL.Store(&u) }

// publicURL is the base of handed-out URLs, without a trailing slash: Config.PublicURL, or the
// listen address, or "" (the URL is then a path) when neither is known.
func (s *Server) publicURL() string {
	if s.cfg.PublicURL != "" {
		return strings.TrimSuffix(s.cfg.PublicURL, "/")
	}
	if u := s.listenURL.Load(); u != nil {
		return strings.TrimSuffix(*u, "/")
	}
	return ""
}

// New builds a Server.
func New(cfg Config, d Deps) *Server {
	cfg = cfg.withDefaults()
	if cfg.Validate() != nil { // contradictory limits: keep the budgets, shrink what must fit
		cfg.CommandOutputBudgetPerOwnerBytes = min(cfg.CommandOutputBudgetPerOwnerBytes, cfg.CommandOutputBudgetBytes)
		cfg.CommandMaxOutputBytes = min(cfg.CommandMaxOutputBytes, cfg.CommandOutputBudgetPerOwnerBytes/2)
		cfg.DownloadBufferBytes = int(min(int64(cfg.DownloadBufferBytes), cfg.DownloadBufferBudgetBytes))
		cfg.DownloadBufferBudgetPerOwnerBytes = min(max(cfg.DownloadBufferBudgetPerOwnerBytes, int64(cfg.DownloadBufferBytes)), cfg.DownloadBufferBudgetBytes)
		cfg.ListMaxWindow = min(cfg.ListMaxWindow, files.MaxRecursiveEntries)
	}
	if cfg.MaxKDFRounds <= 0 {
		cfg.MaxKDFRounds = defaultMaxKDFRounds
	}
	if cfg.KeyParseSlots <= 0 {
		cfg.KeyParseSlots = defaultKeyParseSlots
	}
	if cfg.KeyParseSlotsPerOwner <= 0 {
		cfg.KeyParseSlotsPerOwner = defaultKeyParseSlotsPerOwner
	}
	if cfg.KeyParseWait <= 0 {
		cfg.KeyParseWait = defaultKeyParseWait
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Gatherer == nil {
		d.Gatherer = d.Registry
	}
	s := &Server{cfg: cfg, deps: d, log: d.Log,
		outputs:   command.NewBudget(cfg.CommandOutputBudgetBytes, cfg.CommandOutputBudgetPerOwnerBytes),
		downloads: slot.New(cfg.DownloadBufferBudgetBytes, cfg.DownloadBufferBudgetPerOwnerBytes),
		keySlots:  slot.New(int64(cfg.KeyParseSlots), int64(cfg.KeyParseSlotsPerOwner))}
	s.access = d.Access
	if s.access == nil {
		s.access = access.New(access.Config{}, access.Deps{Store: d.Store, Keyring: d.Keyring, Network: d.Network, Log: d.Log})
	}
	s.limits = newLimits(cfg.OwnerLimits)
	s.temps = newTempKeeper(s)
	s.listSnaps = files.NewSnapshots(files.SnapshotConfig{Bytes: cfg.ListSnapshotBytes, PerOwnerBytes: cfg.ListSnapshotBytesPerOwner, TTL: cfg.ListSnapshotTTL})
	s.loads = slot.New(maxConcurrentLoads, int64(s.limits.maxLoadsPerOwner))
	s.reqDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sshapi_http_request_duration_seconds",
		Help:    "HTTP request latency by route and status code.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"route", "code"})
	d.Registry.MustRegister(s.reqDuration)
	return s
}

// target returns how to reach a system for a command or a credential check: the caller's own
// system, or another's as "{owner}:{id}", which is refused (commands are never granted).
func (s *Server) target(ctx context.Context, owner, id string) (sshpool.Target, *store.System, error) {
	caller, ok := auth.FromContext(ctx)
	if !ok || caller.User != owner {
		caller = auth.Principal{User: owner}
	}
	d, err := s.access.Resolve(ctx, access.Request{Caller: caller, System: id, Level: access.Command})
	if err != nil {
		noteRefusal(ctx, caller.User, id, err)
		return sshpool.Target{}, nil, err
	}
	noteDecision(ctx, d)
	return d.Target, d.System, nil
}
