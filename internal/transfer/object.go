package transfer

// # Transfers with an object-storage end
//
// A System with Storage set (an S3 bucket) is reached through the storage.Backend interface,
// never through SFTP. When either end of a transfer has Storage, the run is an "object" run:
// setup, planning, the rounds and the cleanup dispatch here once (setupObject, objectRound,
// cleanupObject), and SFTP↔SFTP runs keep their own path untouched (ranges over SFTP channel
// pairs, sha256sum and cp on the servers). In an object run both ends are Backends: an SSH end
// becomes the storage/sftp backend over dedicated SFTP channels from the pool (one per stream),
// confined to the system's root_dir and grant by package files, so confinement is written once.
//
// Each file is written through one storage.Upload, cut into parts of partSize (at least the
// backend's MinPartSize, and large enough that a file needs at most MaxParts parts). Parts are
// read from the source with ranged reads (ranged GETs, SFTP ReadAt), several in flight, and an
// SSH destination's upload writes them over all the end's SFTP channels (objstripe.go: one
// channel moves at most its window per round trip), each part
// held in one buffer while it is sent with its SHA-256 (the S3 server refuses a part whose bytes
// changed on the way with BadDigest; the part is sent again). Memory is bounded: a run holds at
// most Config.ObjectBufferBytes/Workers bytes of parts at once, at most max(streams,
// Config.SmallFileConcurrency) parts, and at most its stream count of one file's parts, so all
// runs together stay within ObjectBufferBytes. A
// small object (at most the backend's MinPartSize) is sent whole with one request at Commit
// (storage.Upload), checked by the server against its SHA-256, which it then keeps: there is
// nothing on the server before Commit, so nothing to record or reap.
//
// The whole file's SHA-256 is computed in order as parts finish (orderedHash): a part that
// finishes before the ones ahead of it keeps its buffer until they are hashed. The upload id,
// the finished parts (ETag, SHA-256) and the hash state after the contiguous prefix are
// recorded in the transfer database (transfer_uploads, transfer_parts), so a run that resumes
// after the instance or the object server died reopens the upload (Backend.Resume, which
// confirms the recorded parts with ListParts), sends only the missing parts, and re-reads from
// the source only finished parts beyond the hashed prefix. The file is verified before it
// counts as done: the SHA-256 of the bytes sent is compared with the source's (sha256sum on an
// SFTP source; an S3 source's own full-object checksum when it has one, else the hash computed
// while reading it is the source's), the server's composite checksum of the completed upload
// must be sha256(part sums)-N of the parts sent, and an SFTP destination's SHA-256 must equal
// the file's. The SHA-256 is stored in the item (Item.SHA256).
//
// # Verifying an SSH destination
//
// The bytes sent are hashed in sshapi, but what counts is what is on the destination's disk,
// so the destination system hashes the file itself. It used to run sha256sum on the file after
// the commit: a second full read of the file, after the copy, on its critical path. Now a file
// of several parts is hashed on the destination while its parts land (objdestsum.go, the
// command of destsum.go): a part is handed to the command once its writes were all
// acknowledged by the SFTP server and every part before it was handed over, and the command
// reads it back from the temporary file, in order, from one descriptor. When the last part
// lands only that part is left to hash. Why the digest is sound: it is computed by the
// destination from the file's bytes as the server stores them (read back, not the bytes sshapi
// sent); each byte is read after the write that put it there was acknowledged, and nothing
// writes to the temporary file afterwards (every part of the attempt is finished before the
// sum ends; the file is owner-only and its name unguessable; the commit only cuts it at the
// size the parts cover, which the hash also covered, and renames it). A read that fails, a
// stale tail beyond the size, or a command that never started gives no digest or a wrong one,
// and then the file is hashed after the commit as before, so the stream can cost time, never
// accept a wrong file: the digest is compared with the SHA-256 of the bytes sent, itself
// compared with the source's. A file of one part, or a run with maxDestSums streams open
// already, is hashed after the commit.
//
// No leftovers: a canceled or failed run aborts its uploads; uploads of transfers whose runner
// died are aborted by the engine's reaper once the transfer finished or the upload is older than
// Config.UploadMaxAge — only uploads recorded in transfer_uploads, so never a user's own.
//
// What others can do concurrently: a bucket has no links, so the walk (ListObjectsV2 by
// delimiter) cannot be led outside the source prefix, and an SFTP end is walked by listing
// entries without following links. Another principal may overwrite or delete a source key while
// it is being read: each file records the source's version (ETag on S3, size and mtime over
// SFTP) when its upload starts and checks it again before committing and on resume; a changed
// source restarts the file from scratch (and a file whose source keeps changing fails after
// Config.MaxItemAttempts with "source changed during the transfer"), so no object is ever
// assembled from two versions. S3 writes are atomic per object, so a reader of the destination
// sees the old object or the complete new one, never parts.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/storage"
	sftpstore "github.com/sshapi/sshapi/internal/storage/sftp"
)

// objectRun is the state of a run with an object-storage end.
type objectRun struct {
	src, dst *endpoint
	// srcPath and dstPath are the transfer's paths as the backends name them.
	srcPath, dstPath string
	streams          int
	// parts bounds the parts in flight (count) and mem their bytes.
	parts chan struct{}
	mem   *semaphore.Weighted
	share int64
	// sums bounds the streamed destination sums open at once (maxDestSums).
	sums chan struct{}

	mu      sync.Mutex
	uploads map[int64]*UploadRecord
	// broken is set when a file failed for a lost connection: the next round reopens the
	// SFTP ends' channels.
	broken atomic.Bool
}

// isObject reports whether the run goes through storage backends.
func (r *run) isObject() bool { return r.src.Storage != nil || r.dst.Storage != nil }

// endpoint is one end of an object run as storage backends.
type endpoint struct {
	sys      System
	backends []storage.Backend // one per SFTP channel; the one backend of a Storage system
	fss      []*files.FS       // SFTP: the files.FS of each backend
	leases   []*sshpool.SFTPLease
}

// backend returns the backend for part or file i.
func (e *endpoint) backend(i int) storage.Backend { return e.backends[i%len(e.backends)] }

// sftp reports whether the end is an SSH system.
func (e *endpoint) sftp() bool { return e.sys.Storage == nil }

// close releases the end's SFTP channels.
func (e *endpoint) close() {
	var wg sync.WaitGroup
	for _, l := range e.leases {
		wg.Go(func() { _ = l.Close() })
	}
	wg.Wait()
	e.leases = nil
}

// openEndpoint reaches sys as backends: sys.Storage, or n storage/sftp backends over dedicated
// SFTP channels, confined by package files to the system's root and grant.
func (e *Engine) openEndpoint(ctx context.Context, sys System, n int) (*endpoint, error) {
	ep := &endpoint{sys: sys}
	if sys.Storage != nil {
		ep.backends = []storage.Backend{sys.Storage}
		return ep, nil
	}
	for range max(n, 1) {
		octx, cancel := context.WithTimeout(ctx, e.cfg.OpenTimeout)
		l, err := e.pool.DedicatedSFTP(octx, sys.Target)
		cancel()
		if err != nil {
			ep.close()
			return nil, fmt.Errorf("open SFTP channel: %w", err)
		}
		ep.leases = append(ep.leases, l)
	}
	ep.refresh(e.pool)
	return ep, nil
}

// refresh builds the SFTP end's files.FS and backends afresh on its channels. A files.FS
// remembers the directories its confinement resolved; under a shared end's guard (System.Hold)
// others may restructure the tree between two holds, so each hold starts with fresh ones, as
// the SFTP path's roots Forget.
func (ep *endpoint) refresh(pool Pool) {
	if !ep.sftp() {
		return
	}
	ep.fss, ep.backends = ep.fss[:0], ep.backends[:0]
	for _, l := range ep.leases {
		fsys := files.New(l.Client, command.Exec{Pool: pool, Target: ep.sys.Target}, files.Options{RootDir: ep.sys.RootDir, Within: ep.sys.Within})
		ep.fss = append(ep.fss, fsys)
		ep.backends = append(ep.backends, sftpstore.New(fsys, "/"))
	}
}

// objectPath is p as end ep's backends name it: an SFTP path resolved (home, root_dir, grant),
// a bucket path cleaned.
func objectPath(ctx context.Context, ep *endpoint, p string) (string, error) {
	if !ep.sftp() {
		if strings.ContainsRune(p, 0) {
			return "", permanent(errors.New("path contains a NUL byte"))
		}
		return path.Clean("/" + p), nil
	}
	abs, err := ep.fss[0].Resolve(ctx, p)
	if err != nil {
		if errors.Is(err, files.ErrOutsideRoot) || errors.Is(err, files.ErrInvalid) {
			return "", permanent(err)
		}
		return "", err
	}
	return abs, nil
}

// objectStreams is the number of parts an object run moves at once.
func (r *run) objectStreams() int {
	n := r.t.streamsReq
	if n == 0 {
		n = min(max(r.e.cfg.MinStreams, defaultObjectStreams), r.e.cfg.MaxStreams)
	}
	return n
}

// defaultObjectStreams is the parts in flight of an object run without a requested stream
// count: S3 servers take many requests at once, and a part is large enough that four keep a
// loopback or LAN path busy.
const defaultObjectStreams = 4

// setupObject is setup for an object run: the ends as backends, the plan, the stored items,
// uploads and parts.
func (r *run) setupObject(ctx context.Context) error {
	r.closeObject()
	n := r.objectStreams()
	o := &objectRun{streams: n, uploads: map[int64]*UploadRecord{}, sums: make(chan struct{}, maxDestSums)}
	var err error
	if o.src, err = r.e.openEndpoint(ctx, r.src, n); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if o.dst, err = r.e.openEndpoint(ctx, r.dst, n); err != nil {
		o.src.close()
		return fmt.Errorf("destination: %w", err)
	}
	r.obj = o
	o.track(r)
	if o.srcPath, err = objectPath(ctx, o.src, r.t.Source.Path); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if o.dstPath, err = objectPath(ctx, o.dst, r.t.Destination.Path); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	if strings.HasSuffix(r.t.Destination.Path, "/") && o.dstPath != "/" {
		o.dstPath += "/"
	}
	o.share = max(r.e.cfg.ObjectBufferBytes/int64(r.e.cfg.Workers), 1)
	o.mem = semaphore.NewWeighted(o.share)
	// Small files go SmallFileConcurrency at once, each one part; a large file's parts are
	// bounded by the memory share first.
	o.parts = make(chan struct{}, max(n, r.e.cfg.SmallFileConcurrency))
	if !r.t.planned {
		items, err := r.planObject(ctx)
		if err != nil {
			return err
		}
		if err := r.e.db.plan(ctx, r.t.ID, items, 0); err != nil {
			return dbe(err)
		}
		r.t.planned = true
	}
	items, err := r.e.db.items(ctx, r.t.ID, -1, 0, "")
	if err != nil {
		return dbe(err)
	}
	uploads, err := r.e.db.uploads(ctx, r.t.ID)
	if err != nil {
		return dbe(err)
	}
	o.uploads = uploads
	r.items = make([]*Item, len(items))
	r.ranges = map[int64]map[int]bool{}
	var total, done, nfiles, filesDone, failed, skipped int64
	for i := range items {
		it := &items[i]
		r.items[i] = it
		if it.Kind != KindFile {
			continue
		}
		nfiles++
		total += it.Size
		switch it.Status {
		case ItemDone:
			filesDone++
			done += it.Size
		case ItemSkipped:
			filesDone++
			skipped++
			done += it.Size
		case ItemFailed:
			failed++
		case ItemPending:
			if u := uploads[it.Seq]; u != nil {
				for _, p := range u.Parts {
					done += p.Size
				}
			}
		}
	}
	r.bytesTotal.Store(total)
	r.bytesDone.Store(done)
	r.filesTotal.Store(nfiles)
	r.filesDone.Store(filesDone)
	r.filesFailed.Store(failed)
	r.filesSkipped.Store(skipped)
	r.nstreams.Store(int64(n))
	r.e.log.Info("transfer planned (object storage)", "id", r.t.ID, "files", nfiles, "bytes", total, "bytes_done", done, "streams", n)
	return nil
}

// reopenObject replaces the SFTP channels of an object run's SSH ends after a lost connection.
func (r *run) reopenObject(ctx context.Context) error {
	o := r.obj
	for _, ep := range []**endpoint{&o.src, &o.dst} {
		if !(*ep).sftp() {
			continue
		}
		r.closeEndpoint(*ep)
		fresh, err := r.e.openEndpoint(ctx, (*ep).sys, o.streams)
		if err != nil {
			(*ep).backends, (*ep).fss = nil, nil
			return fmt.Errorf("reopen SFTP channels: %w", err)
		}
		*ep = fresh
	}
	o.track(r)
	return nil
}

// closeEndpoint takes ep's channels from the slow-run watch and closes them.
func (r *run) closeEndpoint(ep *endpoint) {
	for _, l := range ep.leases {
		r.trackLease(l, false)
	}
	ep.close()
}

// track hands the run's SFTP channels to the slow-run watch, which aborts them when the run is
// too slow (see checkRate).
func (o *objectRun) track(r *run) {
	for _, ep := range []*endpoint{o.src, o.dst} {
		for _, l := range ep.leases {
			r.trackLease(l, true)
		}
	}
}

// closeObject releases an object run's SFTP channels.
func (r *run) closeObject() {
	if r.obj == nil {
		return
	}
	r.closeEndpoint(r.obj.src)
	r.closeEndpoint(r.obj.dst)
}

// objectRound tries every pending item of an object run once: directories, links (which
// object storage cannot hold), then the files, several at once.
func (r *run) objectRound(ctx context.Context, pending []*Item) error {
	o := r.obj
	if o.broken.Swap(false) {
		if err := r.reopenObject(ctx); err != nil {
			r.setLastErr(err)
			o.broken.Store(true)
			return nil // the next round tries again after the backoff
		}
	} else if r.src.Hold != nil || r.dst.Hold != nil {
		o.src.refresh(r.e.pool)
		o.dst.refresh(r.e.pool)
	}
	var dirs, links, fls []*Item
	for _, it := range pending {
		switch it.Kind {
		case KindDir:
			dirs = append(dirs, it)
		case KindSymlink:
			links = append(links, it)
		default:
			fls = append(fls, it)
		}
	}
	if len(dirs) > 0 {
		r.attempt(dirs)
		// Without directories of its own (S3) a destination needs a marker only for a
		// directory with nothing in it; the others exist as their keys' prefix.
		markerOnly := !o.dst.backend(0).Capabilities().Can(storage.Directories)
		var parents map[string]bool
		if markerOnly {
			parents = map[string]bool{}
			r.mu.Lock()
			for _, it := range r.items {
				if it.Kind != KindSymlink { // links are not copied there
					parents[path.Dir(it.Destination)] = true
				}
			}
			r.mu.Unlock()
		}
		for _, it := range dirs { // in plan order: parents first
			if markerOnly && parents[it.Destination] {
				r.itemDone(it, "", false)
				continue
			}
			if err := o.dst.backend(0).Mkdir(ctx, it.Destination, true); err != nil {
				r.itemFailed(ctx, it, fmt.Errorf("create directory %s: %w", it.Destination, err))
				continue
			}
			r.itemDone(it, "", false)
		}
		if err := r.save(ctx, dirs); err != nil {
			return err
		}
	}
	if len(links) > 0 {
		r.attempt(links)
		for _, it := range links {
			r.itemFailed(ctx, it, permanent(&storage.UnsupportedError{Kind: "s3", Capability: storage.Symlinks,
				Op: "symbolic link " + it.Source}))
		}
		if err := r.save(ctx, links); err != nil {
			return err
		}
	}
	if r.t.Sync != SyncAlways {
		if err := r.objectSyncCheck(ctx, fls); err != nil {
			return err
		}
		fls = stillPending(fls)
	}
	r.attempt(fls)
	var dbErr error
	var mu sync.Mutex
	var unsaved []*Item // saved BatchFiles at a time: one transaction, not one per small file
	flush := func() {
		if len(unsaved) == 0 {
			return
		}
		if err := r.save(ctx, unsaved); err != nil {
			dbErr = err
		}
		unsaved = nil
	}
	forEach(fls, cap(o.parts), func(i int, it *Item) {
		if ctx.Err() != nil {
			return
		}
		err := r.objectFile(ctx, i, it)
		switch {
		case isDBErr(err):
			mu.Lock()
			dbErr = err
			mu.Unlock()
			return
		case err != nil:
			if isConnErr(err) {
				o.broken.Store(true)
			}
			r.itemFailed(ctx, it, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if unsaved = append(unsaved, it); len(unsaved) >= r.e.cfg.BatchFiles || it.Size > r.t.ChunkSize {
			flush()
		}
	})
	flush()
	return dbErr
}

// objectSyncCheck skips the files the sync level says are already at the destination.
func (r *run) objectSyncCheck(ctx context.Context, fls []*Item) error {
	o := r.obj
	var changed []*Item
	for _, it := range fls {
		e, err := o.dst.backend(0).Stat(ctx, it.Destination)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		skip := false
		switch r.t.Sync {
		case SyncExists:
			skip = true
		case SyncSize:
			skip = e.Type == storage.TypeFile && e.Size == it.Size
		case SyncMtime:
			skip = e.Type == storage.TypeFile && e.Size == it.Size && e.ModTime.Unix() == it.mtime
		case SyncChecksum:
			if e.Type == storage.TypeFile && e.Size == it.Size {
				s, err := r.objectSum(ctx, o.src, it.Source)
				if err != nil {
					return err
				}
				d, err := r.objectSum(ctx, o.dst, it.Destination)
				if err != nil {
					return err
				}
				skip = s != "" && s == d
			}
		}
		if skip {
			r.itemSkipped(it, "")
			changed = append(changed, it)
		}
	}
	return r.save(ctx, changed)
}

// cleanupObject aborts the uploads of a run's unfinished files (canceled or failed run).
func (r *run) cleanupObject(ctx context.Context) {
	o := r.obj
	o.mu.Lock()
	var recs []*UploadRecord
	for _, u := range o.uploads {
		recs = append(recs, u)
	}
	o.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	dst := o.dst
	if len(dst.backends) == 0 { // its channels were lost and not reopened
		ep, err := r.e.openEndpoint(ctx, o.dst.sys, 1)
		if err != nil {
			r.e.log.Warn("transfer: aborting uploads; the reaper will retry", "id", r.t.ID, "err", err)
			return
		}
		defer ep.close()
		dst = ep
	}
	for _, u := range recs {
		if err := r.e.abortUpload(ctx, dst.backend(0), r.t.ID, u.Seq, u.Dst, u.UploadID); err != nil {
			r.e.log.Warn("transfer: aborting an upload", "id", r.t.ID, "file", u.Dst, "err", err)
		}
	}
}

// abortUpload aborts upload id to p on b and forgets it; an upload already gone is fine.
func (e *Engine) abortUpload(ctx context.Context, b storage.Backend, id string, seq int64, p, uploadID string) error {
	up, err := b.Resume(ctx, p, uploadID, nil, storage.UploadOptions{Size: -1, Overwrite: true})
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := up.Abort(ctx); err != nil {
			return err
		}
	}
	return e.db.deleteUpload(context.WithoutCancel(ctx), id, seq)
}
