package cli

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressOptions decide whether a command draws a progress bar: on a terminal unless quiet,
// or always when forced (tests and scripts that want it in a log).
type progressOptions struct {
	quiet bool
	force bool
}

func (o progressOptions) enabled(w io.Writer) bool {
	if o.quiet {
		return false
	}
	if o.force {
		return true
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newBar is a byte progress bar with rate and ETA on w, or nil when bars are off.
func (o progressOptions) newBar(w io.Writer, size int64, what string) *progressbar.ProgressBar {
	if !o.enabled(w) {
		return nil
	}
	return progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(w, "\n") }),
	)
}

// barReader counts what passes through r on bar (bar may be nil).
func barReader(r io.Reader, bar *progressbar.ProgressBar) io.Reader {
	if bar == nil {
		return r
	}
	pr := progressbar.NewReader(r, bar)
	return &pr
}

// barWriter counts what passes to w on bar (bar may be nil).
func barWriter(w io.Writer, bar *progressbar.ProgressBar) io.Writer {
	if bar == nil {
		return w
	}
	return io.MultiWriter(w, bar)
}
