package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/digest"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/storage"
)

// File routes. In URLs the path after the operation is absolute ("ls/scratch/x" is /scratch/x);
// "~" and "~/x" are the remote home and paths inside it, and an empty path is the home. In JSON
// bodies a path is absolute or relative to the home, as in a shell. Repeated slashes, dot
// segments and encoded slashes in a URL's file path belong to the path (see normalizePath).

// defaultListLimit is a listing's page size when limit is not given.
const defaultListLimit = 10_000

// fsCall gives fn a files.FS for the caller's system. bulk asks for an SFTP channel of its own
// (large reads and writes, so one transfer does not share a 2 MiB window with every other
// request); otherwise the connection's shared SFTP channel is borrowed. Idempotent calls are
// retried once on a fresh connection if the connection died under them.
func (s *Server) fsCall(r *http.Request, bulk, idempotent bool, fn func(fsys *files.FS) error) error {
	return s.fsCallWith(r, bulk, idempotent, func(fsys *files.FS, _ sshpool.Target, _ *sftp.Client) error { return fn(fsys) })
}

// fsCallWith is fsCall whose fn also gets the target and the SFTP client under fsys, for
// striped transfers that lease further channels to the same system.
func (s *Server) fsCallWith(r *http.Request, bulk, idempotent bool, fn func(fsys *files.FS, t sshpool.Target, c *sftp.Client) error) error {
	return s.fsCallPre(r, bulk, idempotent, nil, fn)
}

// fsCallPre is fsCallWith that first, once the caller is authorized for the target and before
// the channel fn gets is asked for, calls pre (if set) with the target; what pre returns runs
// once fn has returned. An upload starts there what it will want beside its first channel.
func (s *Server) fsCallPre(r *http.Request, bulk, idempotent bool, pre func(t sshpool.Target) (done func()), fn func(fsys *files.FS, t sshpool.Target, c *sftp.Client) error) error {
	d, err := s.decide(r)
	if err != nil {
		return err
	}
	if d.Storage != nil { // a route without an object handler: never reach an S3 system over SSH
		return &storage.UnsupportedError{Kind: "s3", Capability: storage.Commands, Op: r.Pattern}
	}
	t, sys := d.Target, d.System
	// A grantee or link holder holds the owner's guard from the first path check to the last
	// use of the paths checked (see package guard), and stops if it is lost; the owner's own
	// calls pass straight on.
	release, err := holdFor(r, d)
	if err != nil {
		return err
	}
	defer release()
	temps, finish := s.temps.forRequest(d)
	defer finish()
	if pre != nil {
		defer pre(t)()
	}
	attempts := 1
	if idempotent {
		attempts = 2
	}
	for i := 0; ; i++ {
		var client *sftp.Client
		var done func(error)
		if bulk {
			lease, err := s.deps.Pool.DedicatedSFTP(r.Context(), t)
			if err != nil {
				return err
			}
			client, done = lease.Client, func(error) { _ = lease.Close() }
		} else {
			lease, err := s.deps.Pool.SFTP(r.Context(), t)
			if err != nil {
				return err
			}
			client, done = lease.Client, lease.Done
		}
		home, _ := s.homes.Load(t.Key)
		fsys := files.New(client, command.Exec{Pool: s.deps.Pool, Target: t}, files.Options{RootDir: sys.RootDir, Within: d.Within,
			Home: home, StreamDirBytes: max(s.cfg.ListStreamDirBytes, 0), ListCommand: !s.cfg.ListSFTPOnly, Tools: s.tools.For(t.Key), Temps: temps})
		err = fn(fsys, t, client)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.listSnaps.Invalidate(snapshotID(t)) // after the write: see files' listsnap.go
		}
		if home == "" {
			if h, ok := fsys.KnownHome(); ok {
				s.homes.Store(t.Key, h)
			}
		}
		done(err)
		if err == nil || !errors.Is(err, files.ErrConnection) || i+1 >= attempts {
			return err
		}
		s.log.Info("retrying idempotent file operation on a fresh connection", "route", r.Pattern, "err", err)
	}
}

// homeCache remembers remote home directories by pool key (a new credential is a new key). It
// holds at most maxHomes entries and starts over when full: a miss costs one SFTP round trip.
type homeCache struct {
	mu sync.Mutex
	m  map[sshpool.Key]string
}

const maxHomes = 10_000

// Load returns the cached home for k, or "".
func (c *homeCache) Load(k sshpool.Key) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[k]
	return h, ok
}

// Store records home for k.
func (c *homeCache) Store(k sshpool.Key, home string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxHomes {
		c.m = make(map[sshpool.Key]string)
	}
	c.m[k] = home
}

// toolsCache holds a digest.Tools per pool key (a server as one remote user sees it, whose PATH
// picks the openssl), for the Server's lifetime. It holds at most maxHomes entries and starts
// over when full: a miss costs one openssl self-test on the next checksum of a big file.
type toolsCache struct {
	mu sync.Mutex
	m  map[sshpool.Key]*digest.Tools
}

// For returns k's Tools, new if k has none.
func (c *toolsCache) For(k sshpool.Key) *digest.Tools {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.m[k]; ok {
		return t
	}
	if c.m == nil || len(c.m) >= maxHomes {
		c.m = make(map[sshpool.Key]*digest.Tools)
	}
	t := new(digest.Tools)
	c.m[k] = t
	return t
}

// urlPath turns the {path...} wildcard into a path for package files.
func urlPath(r *http.Request) string {
	p := r.PathValue("path")
	switch {
	case p == "" || p == "~":
		return "."
	case strings.HasPrefix(p, "~/"):
		if rest := strings.TrimLeft(p[2:], "/"); rest != "" {
			return rest
		}
		return "."
	}
	return "/" + p
}

// bodyPath applies the shell's "~" convention to a path from a JSON body.
func bodyPath(field, p string) (string, error) {
	if p == "" {
		return "", badField(field, "is required")
	}
	if strings.ContainsRune(p, 0) {
		return "", badField(field, "must not contain NUL bytes")
	}
	if p == "~" {
		return ".", nil
	}
	if strings.HasPrefix(p, "~/") {
		return strings.TrimPrefix(p, "~/"), nil
	}
	return p, nil
}

// query helpers: a bad value is a 400 naming the parameter.

// queryScanMax is the most '&' separators a query may have for queryGet to scan it itself;
// a longer one goes through url.ParseQuery, whose own limit on the number of parameters
// (GODEBUG urlmaxqueryparams) then applies as before.
const queryScanMax = 64

// queryGet is r.URL.Query().Get(name) without building the url.Values map: a listing reads up
// to eight parameters, and parsing the whole query (a map, and every key and value) for each
// was more than 1% of a 10-entry listing's CPU in the 50-client bench. It reads the pairs as
// url.ParseQuery does (split at '&'; a pair with ';' or a key or value that does not unescape
// is skipped) and returns the first value of name, as Values.Get does; url.QueryUnescape
// allocates only for a key or value with escapes.
func queryGet(r *http.Request, name string) string {
	q := r.URL.RawQuery
	if q == "" {
		return ""
	}
	if strings.Count(q, "&") > queryScanMax {
		return r.URL.Query().Get(name)
	}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err != nil || key != name {
			continue
		}
		if v, err := url.QueryUnescape(v); err == nil {
			return v
		}
	}
	return ""
}

func queryBool(r *http.Request, name string) (bool, error) {
	v := queryGet(r, name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badField(name, "must be true or false")
	}
	return b, nil
}

func queryInt(r *http.Request, name string, def, min, max int) (int, error) {
	v := queryGet(r, name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, badField(name, "must be an integer between %d and %d", min, max)
	}
	return n, nil
}

func parseMode(field, v string) (os.FileMode, error) {
	if v == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, badField(field, "must be an octal mode such as 0644 or 755")
	}
	return files.UnixMode(uint32(m)), nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	var opts files.ListOptions
	var err error
	window := s.cfg.ListMaxWindow
	if opts.Limit, err = queryInt(r, "limit", min(defaultListLimit, window), 1, window); err != nil {
		return err
	}
	if opts.Offset, err = queryInt(r, "offset", 0, 0, 1<<31-1); err != nil {
		return err
	}
	if opts.Offset > window-opts.Limit {
		return badField("offset", "offset+limit must be at most %d (list_max_window): page further with after=<next_after>", window)
	}
	opts.After = queryGet(r, "after")
	opts.Pattern = queryGet(r, "pattern")
	if opts.Pattern != "" {
		if _, err := path.Match(opts.Pattern, ""); err != nil {
			return badField("pattern", "is not a valid glob: %v", err)
		}
	}
	if opts.Recursive, err = queryBool(r, "recursive"); err != nil {
		return err
	}
	if opts.ShowHidden, err = queryBool(r, "show_hidden"); err != nil {
		return err
	}
	if opts.Sort, opts.Desc, err = listSort(r); err != nil {
		return err
	}
	// fsCallWith re-runs the access decision and List the path's confinement on every page;
	// a kept listing is only ever one the same system and credential made (see listsnap.go).
	return s.fsCallWith(r, false, true, func(fsys *files.FS, t sshpool.Target, _ *sftp.Client) error {
		opts.Snapshots, opts.SnapshotID, opts.SnapshotOwner = s.listSnaps, snapshotID(t), snapshotOwner(t)
		l, err := fsys.List(r.Context(), urlPath(r), opts)
		if err != nil {
			return err
		}
		writeListing(w, l)
		return nil
	})
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) error {
	follow, err := queryBool(r, "follow_links")
	if err != nil {
		return err
	}
	return s.fsCall(r, false, true, func(fsys *files.FS) error {
		e, err := fsys.Stat(r.Context(), urlPath(r), follow)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, e)
		return nil
	})
}

// etag identifies a version of a file by size and modification time (SFTP v3 has no better
// change indicator); it is weak because equal size and second might hide a change.
func etag(e *files.Entry) string {
	return fmt.Sprintf(`W/"%x-%x"`, e.Size, e.ModTime.Unix())
}

func contentDisposition(name string) string {
	if name == "" || name == "/" {
		name = "download"
	}
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": name}); v != "" {
		return v
	}
	return "attachment"
}

// getContent streams a file (Range, ETag, conditional requests via http.ServeContent) or a
// directory as an archive, over an SFTP channel of its own, in constant memory.
func (s *Server) getContent(w http.ResponseWriter, r *http.Request) error {
	archive := r.URL.Query().Get("archive")
	switch archive {
	case "", "tar", "tar.gz", "zip":
	default:
		return badField("archive", "must be tar, tar.gz or zip")
	}
	names, err := archiveNames(r, archive)
	if err != nil {
		return err
	}
	return s.fsCallWith(r, true, false, func(fsys *files.FS, t sshpool.Target, c *sftp.Client) error {
		p := urlPath(r)
		e, err := fsys.Stat(r.Context(), p, true)
		if err != nil {
			return err
		}
		if names != nil {
			return s.writeSelection(w, r, fsys, e, names, archive)
		}
		if e.Type == files.TypeDir {
			if archive == "" {
				return errStatus(http.StatusConflict, "%s is a directory: add ?archive=tar, tar.gz or zip to download it", e.Path)
			}
			// Every write of the body has a deadline: a client that stops reading releases the
			// SFTP channel after StreamWriteTimeout.
			dw := s.newDeadlineWriter(w, time.Time{})
			defer dw.done()
			types := map[string]string{"tar": "application/x-tar", "tar.gz": "application/gzip", "zip": "application/zip"}
			w.Header().Set("Content-Type", types[archive])
			w.Header().Set("Content-Disposition", contentDisposition(path.Base(e.Path)+"."+archive))
			w.WriteHeader(http.StatusOK)
			// Errors after the headers cannot change the status; the archive is then truncated
			// and invalid, which archive readers detect.
			return fsys.WriteArchive(r.Context(), p, archive, dw)
		}
		// A large file (or large ranges of one) on a long path is read over several channels at
		// once.
		if st := s.stripes(r.Context(), t, c, wantedBytes(r, e.Size)); st != nil {
			defer st.release()
			return s.serveStriped(w, r, fsys, p, st)
		}
		bufs, release, err := s.readAheadBuffers(r.Context(), wantedBytes(r, e.Size))
		if err != nil {
			return err
		}
		defer release()
		f, e, err := fsys.OpenRead(r.Context(), p)
		if err != nil {
			return err
		}
		defer f.Close()
		sr := files.NewStripedReader([]io.ReaderAt{f}, e.Size, bufs, files.StripeChunksPerChannel)
		defer sr.Close() // before the file is closed and the buffers go back
		return s.serveFile(w, r, e, sr)
	})
}

// serveFile sends a regular file's content with http.ServeContent (Range, ETag, conditional
// requests). Every write of the body has a deadline: a client that stops reading releases the
// SFTP channels after StreamWriteTimeout.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, e *files.Entry, content io.ReadSeeker) error {
	dw := s.newDeadlineWriter(w, time.Time{})
	defer dw.done()
	w.Header().Set("ETag", etag(e))
	w.Header().Set("Content-Disposition", contentDisposition(path.Base(e.Path)))
	w.Header().Set("Accept-Ranges", "bytes")
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	http.ServeContent(bulkResponse{deadlineResponse{ResponseWriter: w, dw: dw}}, r, "", e.ModTime, content)
	if err := dw.Err(); err != nil {
		return fmt.Errorf("download abandoned by the client: %w", err)
	}
	return nil
}

// uploadOptions reads the PUT/POST query: overwrite, parents, mode, sha256 (or X-Checksum-Sha256)
// and digest ("sha256", the default, or "none": the body is not hashed and the answer has no
// sha256).
func uploadOptions(r *http.Request) (files.UploadOptions, error) {
	var o files.UploadOptions
	var err error
	if o.Overwrite, err = queryBool(r, "overwrite"); err != nil {
		return o, err
	}
	if o.Parents, err = queryBool(r, "parents"); err != nil {
		return o, err
	}
	if o.Mode, err = parseMode("mode", r.URL.Query().Get("mode")); err != nil {
		return o, err
	}
	o.SHA256 = r.URL.Query().Get("sha256")
	if h := r.Header.Get("X-Checksum-Sha256"); h != "" {
		if o.SHA256 != "" && !strings.EqualFold(o.SHA256, h) {
			return o, badField("sha256", "the sha256 query parameter and the X-Checksum-Sha256 header differ")
		}
		o.SHA256 = h
	}
	if o.SHA256 != "" && (len(o.SHA256) != 64 || strings.Trim(strings.ToLower(o.SHA256), "0123456789abcdef") != "") {
		return o, badField("sha256", "must be 64 hex digits")
	}
	switch r.URL.Query().Get("digest") {
	case "", "sha256":
	case "none":
		if o.SHA256 != "" {
			return o, badField("digest", "none cannot check the expected sha256 given with it")
		}
		o.NoDigest = true
	default:
		return o, badField("digest", "must be sha256 or none")
	}
	return o, nil
}

// putContent streams the body to a temporary name next to the destination and renames it into
// place only when complete (and, if given, when the SHA-256 matches). An aborted upload leaves
// neither a partial file nor a changed original.
func (s *Server) putContent(w http.ResponseWriter, r *http.Request) error {
	opts, err := uploadOptions(r)
	if err != nil {
		return err
	}
	if r.PathValue("path") == "" || strings.HasSuffix(r.PathValue("path"), "/") {
		return badField("path", "must name a file, not a directory")
	}
	body, done := s.idleBody(w, r)
	defer done()
	tl := newTimeline()
	var early *earlyStripes
	pre := func(t sshpool.Target) func() {
		// A large body to a system the pool has no connection to yet: one stripe connection
		// is dialed beside the first channel's, not after it (see earlyStripes).
		if r.ContentLength >= s.cfg.StripeMinBytes && s.cfg.StripeMaxChannels >= 2 && !s.deps.Pool.Connected(t.Key) {
			early = s.startEarlyStripes(r.Context(), t, 0, earlyStripeDials)
			return early.stop
		}
		return func() {}
	}
	logged := false // on success, the timeline is logged before the answer goes out
	defer func() {
		if !logged {
			s.log.Debug("upload timeline", "steps", tl.String())
		}
	}()
	return body.err(s.fsCallPre(r, true, false, pre, func(fsys *files.FS, t sshpool.Target, c *sftp.Client) error {
		tl.note("channel")
		if early == nil {
			// A large body to a system the pool was connected to: the stripe channels the
			// path's measured round trip calls for are asked for now, beside the upload's first
			// requests, not once its temporary file exists and the probe is back. Now, not
			// before the first channel: they never queue ahead of it for the pool's slots.
			if near, far := s.earlyStripeCount(t.Key, r.ContentLength); near+far > 0 {
				early = s.startEarlyStripes(r.Context(), t, near, far)
				defer early.stop()
			}
		} else if near, far := s.earlyStripeCount(t.Key, r.ContentLength); near+far > 0 {
			// A cold pool: the first channel's connection measured the round trip as it
			// opened, so the other stripe channels are asked for now as on a warm pool (the
			// far ones less those already dialing), not after the probe is back.
			early.next = s.startEarlyStripes(r.Context(), t, near, max(far-earlyStripeDials, 0))
		}
		// A large body on a long path is written over several channels at once; otherwise in
		// chunks over this one, where the budget has room. The round-trip probe that decides
		// (and the stripe channels' opening it starts) runs beside the upload's first requests:
		// Upload asks for the plan once its temporary file exists.
		plan, freeBufs, release := s.planUpload(r.Context(), t, c, r.ContentLength, r.ContentLength, early, tl)
		defer release()
		opts.Plan, opts.Trace = plan, tl.note
		res, err := fsys.Upload(r.Context(), urlPath(r), body, opts)
		if err != nil {
			return uploadErr(err)
		}
		// The file is in place and every handle closed: the answer goes out now, complete,
		// not after the channels are given back (stripe channels closing, the first channel
		// parked or closed: a round trip or more on a long path). Kept listings are dropped
		// first, so a listing the client sends on seeing the answer shows the file.
		s.listSnaps.Invalidate(snapshotID(t))
		// The chunk buffers' budget too: the client's next upload may stripe with it at once.
		freeBufs()
		s.log.Debug("upload timeline", "steps", tl.String())
		logged = true
		writeJSONNow(w, http.StatusCreated, res)
		return nil
	}))
}

// earlyStripeCount is how many stripe channels an upload of size bytes (-1: unknown) to k, whose
// pool is connected to k, asks for as soon as it holds its first channel (see earlyStripes):
// none for a small or unknown body; for a large one as many of each kind as leaseExtra would
// want for the round trip the pool measured on k's connections (sshpool.Pool.RTT), or none while
// it has measured none or that path is short. The probe still decides; what it does not want
// goes back.
func (s *Server) earlyStripeCount(k sshpool.Key, size int64) (near, far int) {
	if size < s.cfg.StripeMinBytes || s.cfg.StripeMaxChannels < 2 {
		return 0, 0
	}
	rtt, ok := s.deps.Pool.RTT(k)
	if !ok {
		return 0, 0
	}
	extra := s.stripeChannels(rtt) - 1
	near = (extra + 1) / 2
	return near, extra - near
}

// planUpload starts deciding, in the background, how an upload of size bytes to t (whose first
// channel is c) moves its body: striped over several channels (see stripes) or in chunks over c
// alone (see uploadChunks). plan waits for the decision and returns the stripe channels (nil
// when not striped) and buffers; freeBufs, once the upload is done with the buffers, waits for
// the decision and gives the buffers (and their budget) back; release, which the caller defers,
// waits for the decision too (whether or not plan was called) and releases everything it holds.
//
// span is the most bytes this request moves (see stripesWith; a PUT's is its size). early, if
// not nil, holds stripe connections asked for before c (see earlyStripes): used as stripes, or
// given back as soon as the upload turns out not to stripe. tl records when the decision was
// taken ("planned").
func (s *Server) planUpload(ctx context.Context, t sshpool.Target, c *sftp.Client, size, span int64, early *earlyStripes, tl *timeline) (plan func() (<-chan *sftp.Client, [][]byte), freeBufs, release func()) {
	var (
		chans    <-chan *sftp.Client
		bufs     [][]byte
		free     = func() {}
		bufsFree = func() {}
		decided  = make(chan struct{})
	)
	go func() { // owned by the request: release waits for it
		defer close(decided)
		defer tl.note("probed")
		if st := s.stripesWith(ctx, t, c, size, span, early); st != nil {
			chans, bufs, free, bufsFree = st.chans, st.bufs, st.release, st.freeBufs
			return
		}
		if early != nil {
			early.stop()
		}
		bufs, free = s.uploadChunks(ctx, size)
		free = sync.OnceFunc(free)
		bufsFree = free
	}()
	return func() (<-chan *sftp.Client, [][]byte) {
			<-decided
			return chans, bufs
		}, func() {
			<-decided
			bufsFree()
		}, func() {
			<-decided
			free()
		}
}

// uploadErr reports a body that could not be read (client went away, body too large) as such.
func uploadErr(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return errStatus(http.StatusRequestEntityTooLarge, "upload exceeds %d bytes", tooBig.Limit)
	}
	return err
}

// postContent accepts multipart/form-data (browsers) with one or more file parts and uploads each
// into the directory in the URL, atomically like PUT.
func (s *Server) postContent(w http.ResponseWriter, r *http.Request) error {
	opts, err := uploadOptions(r)
	if err != nil {
		return err
	}
	if opts.SHA256 != "" {
		return badField("sha256", "is only supported for single-file PUT uploads")
	}
	body, done := s.idleBody(w, r)
	defer done()
	r.Body = io.NopCloser(body)
	mr, err := r.MultipartReader()
	if err != nil {
		return errStatus(http.StatusUnsupportedMediaType, "POST to a directory needs a multipart/form-data body: %v", err)
	}
	var results []*files.UploadResult
	err = s.fsCall(r, true, false, func(fsys *files.FS) error {
		dir := urlPath(r)
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return errStatus(http.StatusBadRequest, "malformed multipart body: %v", err)
			}
			name := part.FileName()
			if name == "" {
				part.Close()
				continue // a plain form field
			}
			if name != path.Base(name) || name == "." || name == ".." || strings.ContainsRune(name, '/') || !utf8.ValidString(name) {
				return badField("filename", "%q must be a plain file name", name)
			}
			res, err := fsys.Upload(r.Context(), path.Join(dir, name), part, opts)
			part.Close()
			if err != nil {
				return uploadErr(err)
			}
			results = append(results, res)
		}
		return nil
	})
	if err := body.err(err); err != nil {
		return err
	}
	if len(results) == 0 {
		return badField("file", "the multipart body has no file part")
	}
	writeJSON(w, http.StatusCreated, map[string]any{"uploaded": results})
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	return s.fsCall(r, false, false, func(fsys *files.FS) error {
		if err := fsys.Remove(r.Context(), urlPath(r), recursive); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) checksumFile(w http.ResponseWriter, r *http.Request) error {
	algo := r.URL.Query().Get("algorithm")
	if algo == "" {
		algo = "sha256"
	}
	switch algo {
	case "sha256", "sha512", "sha1", "md5":
	default:
		return badField("algorithm", "must be sha256, sha512, sha1 or md5")
	}
	return s.fsCall(r, false, true, func(fsys *files.FS) error {
		sum, err := fsys.Checksum(r.Context(), urlPath(r), algo)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]string{"path": urlPath(r), "algorithm": algo, "checksum": sum})
		return nil
	})
}

func (s *Server) excerpt(tail bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		if q.Get("bytes") != "" && q.Get("lines") != "" {
			return badField("bytes", "give bytes or lines, not both")
		}
		n, err := queryInt(r, "bytes", 0, 1, files.MaxExcerpt)
		if err != nil {
			return err
		}
		lines, err := queryInt(r, "lines", 0, 1, 1_000_000)
		if err != nil {
			return err
		}
		if n == 0 && lines == 0 {
			lines = files.DefaultLines
		}
		return s.fsCall(r, false, true, func(fsys *files.FS) error {
			var ex *files.Excerpt
			if tail {
				ex, err = fsys.Tail(r.Context(), urlPath(r), n, lines)
			} else {
				ex, err = fsys.Head(r.Context(), urlPath(r), n, lines)
			}
			if err != nil {
				return err
			}
			out := map[string]any{"size": ex.Size, "truncated": ex.Truncated}
			out["content"], out["encoding"] = encodeBytes(ex.Data)
			writeJSON(w, http.StatusOK, out)
			return nil
		})
	}
}

// encodeBytes returns b as text if it is UTF-8, else base64 with encoding "base64".
func encodeBytes(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

func (s *Server) fileType(w http.ResponseWriter, r *http.Request) error {
	return s.fsCall(r, false, true, func(fsys *files.FS) error {
		t, err := fsys.FileType(r.Context(), urlPath(r))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]string{"path": urlPath(r), "type": t})
		return nil
	})
}

func (s *Server) diskUsage(w http.ResponseWriter, r *http.Request) error {
	return s.fsCall(r, false, true, func(fsys *files.FS) error {
		d, err := fsys.DiskUsage(r.Context(), urlPath(r))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, d)
		return nil
	})
}

// Operation bodies for POST /v1/systems/{id}/ops/{op}.
type (
	mkdirBody struct {
		Path    string `json:"path"`
		Parents bool   `json:"parents"`
	}
	moveBody struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
		Overwrite   bool   `json:"overwrite"`
	}
	copyBody struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
		Recursive   bool   `json:"recursive"`
		Overwrite   bool   `json:"overwrite"`
		Dereference bool   `json:"dereference"`
	}
	chmodBody struct {
		Path      string `json:"path"`
		Mode      string `json:"mode"`
		Recursive bool   `json:"recursive"`
	}
	chownBody struct {
		Path      string `json:"path"`
		Owner     string `json:"owner"`
		Group     string `json:"group"`
		Recursive bool   `json:"recursive"`
	}
	symlinkBody struct {
		Target string `json:"target"`
		Link   string `json:"link"`
	}
	compressBody struct {
		Sources []string `json:"sources"`
		Archive string   `json:"archive"`
		Format  string   `json:"format"`
	}
	extractBody struct {
		Archive     string `json:"archive"`
		Destination string `json:"destination"`
	}
)

// fileOp runs one of the POST operations; each decodes its own body and answers 200 with
// {"ok":true,...} describing what was done.
func (s *Server) fileOp(w http.ResponseWriter, r *http.Request) error {
	op := r.PathValue("op")
	var run func(ctx context.Context, fsys *files.FS) (map[string]any, error)
	var paths []string // every path the operation touches, for the access decision
	var args opArgs    // what an S3 system needs of the body (objectOp)
	switch op {
	case "mkdir":
		var b mkdirBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		p, err := bodyPath("path", b.Path)
		if err != nil {
			return err
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"path": b.Path}, fsys.Mkdir(ctx, p, b.Parents)
		}
		paths = []string{p}
		args = opArgs{show: map[string]any{"path": b.Path}, parents: b.Parents}
	case "move":
		var b moveBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		src, dst, err := twoPaths(b.Source, b.Destination)
		if err != nil {
			return err
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"source": b.Source, "destination": b.Destination}, fsys.Move(ctx, src, dst, b.Overwrite)
		}
		paths = []string{src, dst}
		args = opArgs{show: map[string]any{"source": b.Source, "destination": b.Destination}, overwrite: b.Overwrite}
	case "copy":
		var b copyBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		src, dst, err := twoPaths(b.Source, b.Destination)
		if err != nil {
			return err
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"source": b.Source, "destination": b.Destination},
				fsys.Copy(ctx, src, dst, files.CopyOptions{Recursive: b.Recursive, Overwrite: b.Overwrite, Dereference: b.Dereference})
		}
		paths = []string{src, dst}
		args = opArgs{show: map[string]any{"source": b.Source, "destination": b.Destination}, overwrite: b.Overwrite, recursive: b.Recursive}
	case "chmod":
		var b chmodBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		p, err := bodyPath("path", b.Path)
		if err != nil {
			return err
		}
		if b.Mode == "" {
			return badField("mode", "is required (octal, e.g. 0640)")
		}
		mode, err := parseMode("mode", b.Mode)
		if err != nil {
			return err
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"path": b.Path, "mode": files.ModeString(mode)}, fsys.Chmod(ctx, p, mode, b.Recursive)
		}
		paths = []string{p}
		args = opArgs{unsupported: storage.Modes, unsupportedOperation: "chmod"}
	case "chown":
		var b chownBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		p, err := bodyPath("path", b.Path)
		if err != nil {
			return err
		}
		if b.Owner == "" && b.Group == "" {
			return badField("owner", "owner or group is required")
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"path": b.Path}, fsys.Chown(ctx, p, b.Owner, b.Group, b.Recursive)
		}
		paths = []string{p}
		args = opArgs{unsupported: storage.Modes, unsupportedOperation: "chown"}
	case "symlink":
		var b symlinkBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		if b.Target == "" {
			return badField("target", "is required")
		}
		link, err := bodyPath("link", b.Link)
		if err != nil {
			return err
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"target": b.Target, "link": b.Link}, fsys.Symlink(ctx, b.Target, link)
		}
		paths = []string{link}
		args = opArgs{unsupported: storage.Symlinks, unsupportedOperation: "symlink"}
	case "compress":
		var b compressBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		if len(b.Sources) == 0 {
			return badField("sources", "is required: a list of paths")
		}
		srcs := make([]string, len(b.Sources))
		for i, src := range b.Sources {
			p, err := bodyPath("sources", src)
			if err != nil {
				return err
			}
			srcs[i] = p
		}
		archive, err := bodyPath("archive", b.Archive)
		if err != nil {
			return err
		}
		if b.Format == "" {
			b.Format = "tar.gz"
		}
		switch b.Format {
		case "tar", "tar.gz", "tar.bz2", "tar.xz":
		default:
			return badField("format", "must be tar, tar.gz, tar.bz2 or tar.xz")
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"archive": b.Archive, "format": b.Format}, fsys.Compress(ctx, srcs, archive, b.Format)
		}
		paths = append(srcs, archive)
		args = opArgs{unsupported: storage.Commands, unsupportedOperation: "compress"}
	case "extract":
		var b extractBody
		if err := decodeJSON(r, &b); err != nil {
			return err
		}
		archive, err := bodyPath("archive", b.Archive)
		if err != nil {
			return err
		}
		dst, err := bodyPath("destination", b.Destination)
		if err != nil {
			return err
		}
		run = func(ctx context.Context, fsys *files.FS) (map[string]any, error) {
			return map[string]any{"archive": b.Archive, "destination": b.Destination}, fsys.Extract(ctx, archive, dst)
		}
		paths = []string{archive, dst}
		args = opArgs{unsupported: storage.Commands, unsupportedOperation: "extract"}
	default:
		return errStatus(http.StatusNotFound, "unknown operation %q: use mkdir, move, copy, chmod, chown, symlink, compress or extract", op)
	}
	start := time.Now()
	r = withOpPaths(r, paths)
	switch op {
	case "move", "copy", "symlink", "extract":
		r = withRestructure(r)
	}
	d, err := s.decide(r)
	if err != nil {
		return err
	}
	if d.Storage != nil {
		args.paths = paths
		return s.objectOp(w, r, d, op, args)
	}
	r = withDecision(r, d)
	return s.fsCall(r, false, false, func(fsys *files.FS) error {
		out, err := run(r.Context(), fsys)
		if err != nil {
			return err
		}
		out["ok"], out["op"], out["duration_ms"] = true, op, time.Since(start).Milliseconds()
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func twoPaths(src, dst string) (string, string, error) {
	s, err := bodyPath("source", src)
	if err != nil {
		return "", "", err
	}
	d, err := bodyPath("destination", dst)
	if err != nil {
		return "", "", err
	}
	return s, d, nil
}
