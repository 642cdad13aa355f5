package service

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/sshapi/sshapi/internal/forwarded"
)

// httpServer builds the HTTP server from the server and TLS sections: bounded headers, per-read
// and per-write deadlines (see ioDeadlines), client addresses from trusted proxies only, and the
// reloading certificate when TLS is on.
func (s *Service) httpServer() (*http.Server, error) {
	sc := s.cfg.Server
	trusted, err := forwarded.Parse(sc.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("server.trusted_proxies: %w", err)
	}
	h := s.api.Handler()
	if s.ui != nil {
		h = s.ui.Handler(h) // /ui/ and the headers that keep user content inert
	}
	srv := &http.Server{
		Handler:           trusted.Handler(ioDeadlines(h, sc.BodyReadTimeout, sc.WriteTimeout)),
		ReadHeaderTimeout: sc.ReadHeaderTimeout,
		IdleTimeout:       sc.IdleTimeout,
		MaxHeaderBytes:    sc.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if s.cert != nil {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.cert.GetCertificate}
	}
	return srv, nil
}
