package study

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/config"
)

// runChannels measures an upload and a download through a fresh sshapi per channel count in
// counts (0 = sshapi's automatic choice), every one on the same path (one proxy), then, with
// tmpl.Peers, OpenSSH sftp put and get over it. The system is registered as prefix-ch<n>.
func runChannels(ctx context.Context, l *lab, base config.Config, counts []int, prefix string, ends *pathEnds, tmpl *bench.TransferBench) error {
	ep, err := ends.open(ctx, prefix+"-channels")
	if err != nil {
		return err
	}
	for _, n := range counts {
		if err := runChannelCount(ctx, l, base, n, prefix, ep, tmpl); err != nil {
			return err
		}
	}
	if !tmpl.Peers {
		return nil
	}
	tb := *tmpl
	tb.Src = bench.TransferEndpoint{SSH: ep}
	return tb.RunChannelPeers(ctx)
}

// runChannelCount starts sshapi configured for n channels per transfer, registers the path's
// endpoint ep with it and measures an upload and a download.
func runChannelCount(ctx context.Context, l *lab, base config.Config, n int, prefix string, ep bench.SSHEndpoint, tmpl *bench.TransferBench) error {
	cfg := base
	forceChannels(&cfg, n)
	id := fmt.Sprintf("%s-ch%s", prefix, bench.ChannelsLabel(n))
	log := &stripeLog{errs: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}), last: &atomic.Int64{}}
	api, stop, err := l.service(ctx, "data-"+id, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	if err := l.register(ctx, api, id, ep.Host, ep.Port, nil); err != nil {
		return err
	}
	tb := *tmpl
	tb.API, tb.Src = api, bench.TransferEndpoint{System: id, SSH: ep}
	return tb.RunChannels(ctx, n, log.take)
}

// forceChannels makes every upload and download of cfg's service use n SFTP channels (n > 1:
// striping on any path and file size; n = 1: striping off); n = 0 leaves sshapi's choice.
func forceChannels(cfg *config.Config, n int) {
	switch {
	case n == 1:
		cfg.HTTP.StripeMaxChannels = 1
	case n > 1:
		cfg.HTTP.StripeMaxChannels = n
		cfg.HTTP.StripeMinRTT = time.Nanosecond
		cfg.HTTP.StripeLinkRate = 1e15
		cfg.HTTP.StripeMinBytes = 1
	}
}

// stripeMessage is the debug record sshapi logs when it stripes a transfer, with the channel
// count as the attribute "channels".
const stripeMessage = "striping a file transfer"

// stripeLog is the service's log handler in the channel runs: it remembers the channel count of
// the last striped transfer and passes errors on to errs.
type stripeLog struct {
	errs slog.Handler
	last *atomic.Int64
}

// Enabled lets debug records through: the striping record is one.
func (h *stripeLog) Enabled(context.Context, slog.Level) bool { return true }

// Handle notes the striping record's channel count and forwards errors.
func (h *stripeLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == stripeMessage {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "channels" && a.Value.Kind() == slog.KindInt64 {
				h.last.Store(a.Value.Int64())
				return false
			}
			return true
		})
	}
	if r.Level >= slog.LevelError {
		return h.errs.Handle(ctx, r)
	}
	return nil
}

// WithAttrs shares the channel count with the derived handler.
func (h *stripeLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &stripeLog{errs: h.errs.WithAttrs(as), last: h.last}
}

// WithGroup shares the channel count with the derived handler.
func (h *stripeLog) WithGroup(name string) slog.Handler {
	return &stripeLog{errs: h.errs.WithGroup(name), last: h.last}
}

// take returns the channels of the transfer since the last take: what the striping record said,
// or 1 when the transfer was not striped.
func (h *stripeLog) take() int {
	if n := h.last.Swap(0); n > 0 {
		return int(n)
	}
	return 1
}
