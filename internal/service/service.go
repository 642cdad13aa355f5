// Package service assembles a running sshapi from its configuration: the data directory and its
// generated secrets, the store, the credential keyring, the token verifier, the SSH pool and the
// HTTP server, and starts and stops them in order.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/api"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/jobs"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/auditspool"
	"github.com/sshapi/sshapi/internal/tlsfile"
	"github.com/sshapi/sshapi/internal/transfer"
	"github.com/sshapi/sshapi/internal/ui"
)

// Files inside the data directory.
const (
	MasterKeyFile = "master.key"
	JWTSecretFile = "jwt-secret"
	DatabaseFile  = "sshapi.db"
	// TransfersFile holds transfers and their River job queue.
	TransfersFile = "transfers.db"
)

// Version is the build's version, set by the linker (-X) or left as "dev".
var Version = "dev"

// Service is one running sshapi instance.
type Service struct {
	cfg      config.Config
	log      *slog.Logger
	cert     *tlsfile.Cert // nil without TLS
	db       store.Store
	verifier *auth.Verifier
	pool     *sshpool.Pool
	tdb      transfer.Persistence
	engine   *transfer.Engine
	jobs     *jobs.Service
	api      *api.Server
	ui       *ui.Server // nil when the web interface is disabled
	uploads  *api.UploadSweeper
	gcFloor  *gcFloor // nil when off or GOGC is set
	access   *access.Resolver
	guardPG  *guard.Postgres   // nil on SQLite
	spool    *auditspool.Spool // nil when http.audit_spool_dir is "off"
	http     *http.Server
	ln       net.Listener
	served   chan error
}

// DevSecret loads (creating if needed) the data directory's HS256 secret for development tokens.
func DevSecret(dataDir string) ([]byte, error) {
	if _, err := checkDataDir(dataDir); err != nil {
		return nil, err
	}
	return secret.LoadOrCreateSecretFile(filepath.Join(dataDir, JWTSecretFile), 32)
}

// New opens everything the service needs; nothing listens until Start.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var cert *tlsfile.Cert // loaded first: a bad certificate stops the start before anything is made
	if cfg.TLS.Enabled() {
		var err error
		if cert, err = tlsfile.Load(cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.ReloadInterval, log.With("component", "tls")); err != nil {
			return nil, err
		}
	}
	var databases []string
	if !IsPostgres(cfg.Database) {
		storePath, transfersPath := sqlitePaths(cfg)
		databases = []string{storePath, transfersPath}
	}
	tightened, err := PrepareDataDir(cfg.DataDir, databases...)
	if err != nil {
		return nil, err
	}
	if len(tightened) > 0 {
		log.Warn("made data directory files private: group or other users could read them", "paths", tightened)
	}
	keyring, err := LoadKeyring(cfg)
	if err != nil {
		return nil, err
	}
	authCfg := auth.Config{JWKSURL: cfg.Auth.JWKSURL, Issuer: cfg.Auth.Issuer, Audience: cfg.Auth.Audience,
		JWKSRefresh: cfg.Auth.JWKSRefresh, JWKSMinRefresh: cfg.Auth.JWKSMinRefresh, JWKSFetchTimeout: cfg.Auth.JWKSFetchTimeout,
		Log: log.With("component", "auth"), GroupsClaim: cfg.Auth.GroupsClaim, Operators: cfg.Auth.Operators, OperatorGroup: cfg.Auth.OperatorGroup}
	if authCfg.HS256Secret, err = TokenSecret(cfg); err != nil && !errors.Is(err, ErrDevSecretOff) {
		return nil, fmt.Errorf("dev JWT secret: %w", err)
	}
	verifier, err := auth.New(ctx, authCfg)
	if err != nil {
		return nil, fmt.Errorf("token verifier: %w", err)
	}
	db, tdb, err := OpenDatabases(ctx, cfg)
	if err != nil {
		verifier.Close()
		return nil, err
	}
	var web *ui.Server // the web interface, unless disabled
	var sessions api.SessionAuthenticator
	if !cfg.UI.Disabled {
		web, err = ui.New(cfg.UI, ui.Deps{Store: db, Log: log.With("component", "ui"), PublicURL: cfg.HTTP.PublicURL,
			GroupsClaim: cfg.Auth.GroupsClaim, Operators: cfg.Auth.Operators, OperatorGroup: cfg.Auth.OperatorGroup})
		if err != nil {
			tdb.Close()
			db.Close()
			verifier.Close()
			return nil, err
		}
		sessions = web
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	network, err := netpolicy.New(cfg.Network)
	if err != nil {
		tdb.Close()
		db.Close()
		verifier.Close()
		return nil, err
	}
	pool := sshpool.New(cfg.Pool, log.With("component", "sshpool"), reg, sshpool.WithNetworkPolicy(network))
	// The API and the transfer engine reach systems through one access layer: credentials, host
	// key policy, root_dir, grants and links.
	// Grantees' operations on an owner's files are ordered across instances on PostgreSQL.
	var remote guard.Remote
	var guardPG *guard.Postgres
	if IsPostgres(cfg.Database) {
		sharing := cfg.Sharing.WithDefaults()
		if guardPG, err = guard.OpenPostgres(ctx, cfg.Database, sharing.Guard); err != nil {
			tdb.Close()
			db.Close()
			verifier.Close()
			return nil, err
		}
		remote = guardPG
	}
	accCfg := cfg.Sharing
	accCfg.S3 = cfg.S3
	acc := access.New(accCfg, access.Deps{Store: db, Keyring: keyring, Network: network, Log: log.With("component", "access"),
		Guard: guard.New(cfg.Sharing.WithDefaults().Guard, remote)})
	engine, err := transfer.New(cfg.Transfer, transfer.Deps{
		DB: tdb, Pool: pool, Log: log.With("component", "transfer"), Registerer: reg,
		Resolver: acc.TransferResolver(),
	})
	if err != nil {
		if guardPG != nil {
			guardPG.Close()
		}
		tdb.Close()
		db.Close()
		verifier.Close()
		return nil, fmt.Errorf("transfer engine: %w", err)
	}
	js := jobs.New(cfg.Jobs)
	srv := api.New(cfg.HTTP, api.Deps{
		Store: db, Keyring: keyring, Pool: pool, Verifier: verifier, Transfers: engine, Access: acc, Jobs: js,
		Log: log.With("component", "api"), Registry: reg, Version: Version, Network: network, Sessions: sessions,
	})
	return &Service{cfg: cfg, log: log, cert: cert, db: db, verifier: verifier, pool: pool, tdb: tdb, engine: engine, jobs: js, api: srv, uploads: srv.UploadSweeper(0), access: acc, guardPG: guardPG, ui: web, served: make(chan error, 1)}, nil
}

// Start listens on the configured address and serves in the background.
func (s *Service) Start(ctx context.Context) error {
	applyMemoryLimit(s.cfg, s.log)
	s.gcFloor = startGCFloor(s.cfg, s.log)
	if err := s.pool.Start(ctx); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	if err := s.engine.Start(ctx); err != nil {
		return fmt.Errorf("transfer engine: %w", err)
	}
	if err := s.openAuditSpool(ctx); err != nil {
		return err
	}
	s.access.Start(ctx) // audit retention
	s.jobs.Start()
	s.uploads.Start(ctx)     // removes expired resumable uploads' part files
	s.api.Temps().Start(ctx) // renews temporary-name records, removes names left behind
	if s.ui != nil {
		s.ui.Start(ctx) // deletes expired sessions
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.ln = ln
	if s.cfg.HTTP.PublicURL == "" {
		scheme := "http"
		if s.cert != nil {
			scheme = "https"
		}
		s.api.SetListenURL(scheme + "://" + ln.Addr().String())
		if s.ui != nil {
			s.ui.SetListenURL(scheme + "://" + ln.Addr().String())
		}
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().IsLoopback() {
			s.log.Warn("http.public_url is not set: links carry the listen address; set it to the address clients use", "addr", ln.Addr().String())
		}
	}
	s.http, err = s.httpServer()
	if err != nil {
		ln.Close()
		return err
	}
	s.http.RegisterOnShutdown(s.engine.BeginShutdown) // end transfer event streams so Shutdown can drain
	go func() {
		if s.cert != nil {
			s.served <- s.http.ServeTLS(ln, "", "") // the certificate comes from TLSConfig.GetCertificate
			return
		}
		s.served <- s.http.Serve(ln)
	}()
	s.log.Info("sshapi listening", "addr", ln.Addr().String(), "tls", s.cert != nil, "behind_proxy", s.cfg.Server.BehindProxy,
		"data_dir", s.cfg.DataDir, "version", Version)
	return nil
}

// openAuditSpool opens this instance's audit spool (http.audit_spool_dir, by default under the
// data directory), hands it to the API and starts draining what an earlier run left in it.
func (s *Service) openAuditSpool(ctx context.Context) error {
	dir := s.cfg.HTTP.AuditSpoolDir
	if dir == "off" {
		return nil
	}
	if dir == "" {
		dir = filepath.Join(s.cfg.DataDir, "audit-spool")
	}
	limit := s.cfg.HTTP.AuditSpoolMax
	if limit <= 0 {
		limit = 100_000 // as api.Config's default
	}
	sp, err := auditspool.Open(auditspool.Config{Dir: dir, Max: limit}, s.db, s.log.With("component", "audit-spool"))
	if err != nil {
		return err
	}
	s.spool = sp
	s.api.UseAuditSpool(sp)
	sp.Start(ctx)
	return nil
}

// Addr is the address the service listens on (useful with port 0).
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Stop stops accepting requests, drains in-flight ones and SSH work within ctx, then closes
// the pool, the verifier and the store.
func (s *Service) Stop(ctx context.Context) error {
	var errs []error
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		if err := <-s.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http serve: %w", err))
		}
	}
	s.access.Stop()
	s.jobs.Stop()
	s.uploads.Stop()
	s.api.Temps().Stop()
	if s.spool != nil {
		s.spool.Stop()
		_ = s.spool.Close()
	}
	if s.ui != nil {
		s.ui.Stop()
	}
	if err := s.engine.Stop(ctx); err != nil { // running transfers save progress and re-queue
		errs = append(errs, fmt.Errorf("transfer engine: %w", err))
	}
	if err := s.pool.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.verifier.Close(); err != nil {
		errs = append(errs, fmt.Errorf("verifier: %w", err))
	}
	if s.guardPG != nil {
		s.guardPG.Close()
	}
	if s.gcFloor != nil {
		s.gcFloor.Stop()
	}
	if err := s.tdb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("transfer store: %w", err))
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("store: %w", err))
	}
	return errors.Join(errs...)
}

// Run starts the service and blocks until ctx ends, then stops it within the shutdown timeout.
func (s *Service) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-s.served:
		s.served <- err
	}
	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	return s.Stop(stopCtx)
}

// UI is the web interface, or nil when it is disabled.
func (s *Service) UI() *ui.Server { return s.ui }
