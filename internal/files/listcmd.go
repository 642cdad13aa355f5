package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/shell"
)

// A large directory can be listed by one command on the server instead of SFTP READDIRs:
// GNU find prints every entry's lstat attributes and symlink target in one pass, which costs
// the server far less than sftp-server's READDIR replies (an ls -l style long name per entry)
// and saves the readlink round trips. Fields are NUL-terminated, and NUL is the one byte no
// file name holds, so hostile names stay data.

// findFields is the number of fields findFormat prints per entry.
const findFields = 7

// findNamesFormat prints an entry's name and type letter only: what a page in name order
// needs to choose its entries. find then needs no lstat where the directory entry carries its
// type (d_type), and prints a quarter of the bytes; the page's own entries are stat'ed after
// (FS.fillAttrs).
const findNamesFormat = `%f\0%y\0`

// modeUnknown marks, in a dirent's or record's st_mode, an entry whose attributes were not
// read (only its name and file type): SFTP's st_mode uses the low 16 bits.
const modeUnknown = 1 << 31

// findFormat: name, type letter and octal mode, size, mtime (seconds since the epoch),
// uid, gid, symlink target (empty unless a symlink).
const findFormat = `%f\0%y%m\0%s\0%T@\0%U\0%G\0%l\0`

// POSIX file type bits of st_mode, as SFTP carries them.
const (
	sIFIFO  = 0o010000
	sIFCHR  = 0o020000
	sIFDIR  = 0o040000
	sIFBLK  = 0o060000
	sIFREG  = 0o100000
	sIFLNK  = 0o120000
	sIFSOCK = 0o140000
	sIFMT   = 0o170000
)

// maxFindField bounds one field of find's output: names are at most 255 bytes and link
// targets PATH_MAX; anything longer is not find's output.
const maxFindField = 16 << 10

// maxFindEntry bounds one entry of find's output (its fields and their NULs).
const maxFindEntry = findFields * (maxFindField + 1)

// findBuffer is find's stdout buffer, set with coreutils' stdbuf. By default find writes to
// the pipe in 4 KiB pieces, each an SSH packet that wakes sshd and sshapi (decryption, window
// adjustment, goroutine hand-offs): for 10,000 entries that is ~115 packets and about 6 ms of
// sshapi CPU more than with 64 KiB writes. Nothing is lost in latency: a listing is sorted,
// so no entry can be sent before find's last.
const findBuffer = "64K"

// errFindUnusable marks a find that could not list the directory before printing anything:
// the caller falls back to SFTP, which also classifies real errors (missing, not a directory).
var errFindUnusable = errors.New("find -printf unusable")

// findDirents lists directory dir with one `find -printf` on the server, calling fn for each
// entry (with its symlink target). It returns errFindUnusable when fn was never called (no GNU
// find, unreadable or empty directory, not a directory, no command runner).
//
// With namesOnly, entries carry their name and file type only (modeUnknown set).
func (f *FS) findDirents(ctx context.Context, dir string, namesOnly bool, fn func(*dirent) error) error {
	if f.run == nil {
		return errFindUnusable
	}
	p := &findParser{fn: fn, namesOnly: namesOnly}
	stderr := &cappedBuffer{max: maxCommandOutput}
	format := findFormat
	if namesOnly {
		format = findNamesFormat
	}
	argv := []string{"find", "-H", dir, "-mindepth", "1", "-maxdepth", "1", "-printf", format}
	status, err := f.run.Run(ctx, shell.Command(append([]string{"stdbuf", "-o" + findBuffer}, argv...)...), nil, p, stderr)
	if err == nil && status == 127 && p.entries == 0 && ctx.Err() == nil {
		// No stdbuf (busybox systems with GNU findutils): find as it is.
		stderr.buf.Reset()
		status, err = f.run.Run(ctx, shell.Command(argv...), nil, p, stderr)
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if p.entries == 0 {
		// Nothing listed: find failed, or dir is empty or not a directory at all (find prints
		// nothing for a file). SFTP tells these apart, cheaply since nothing is to be read.
		return errFindUnusable
	}
	if err == nil && status == 0 && p.err == nil && len(p.rest) == 0 {
		return nil
	}
	switch {
	case p.err != nil:
		return p.err
	case err != nil:
		return err
	case status != 0:
		msg := strings.TrimSpace(stderr.buf.String())
		return &Error{Op: "list", Path: dir, Kind: classifyText(msg), Err: fmt.Errorf("find exited with status %d: %s", status, msg)}
	}
	return errors.New("find: output ends inside an entry")
}

// findParser is the io.Writer find's stdout goes to: it parses each complete entry where it
// lies in the written bytes (nothing is allocated per entry or field) and hands it to fn,
// holding back at most one incomplete entry between writes.
type findParser struct {
	fn      func(*dirent) error
	rest    []byte // the start of an incomplete entry
	d       dirent // the entry handed to fn
	entries int    // entries handed to fn
	err     error  // first parse or fn error: later output is ignored

	namesOnly bool // the output is findNamesFormat's
}

// Write implements io.Writer. It never fails, so the command runs to its end; the first error
// is kept in p.err.
func (p *findParser) Write(b []byte) (int, error) {
	n := len(b)
	if p.err != nil {
		return n, nil
	}
	if len(p.rest) > 0 {
		p.rest = append(p.rest, b...)
		b = p.rest
	}
	for len(b) > 0 {
		rest, err := p.parseEntry(b)
		if err == nil && rest == nil {
			break // incomplete
		}
		if err == nil {
			p.entries++
			err = p.fn(&p.d)
		}
		if err != nil {
			p.err, p.rest = err, nil
			return n, nil
		}
		b = rest
	}
	if len(b) > maxFindEntry {
		p.err, p.rest = errors.New("find: field too long"), nil
		return n, nil
	}
	p.rest = append(p.rest[:0], b...) // b may lie in p.rest: append moves it down
	return n, nil
}

// parseEntry parses the entry at the start of b into p.d and returns what follows it, or
// nil and no error when b holds no complete entry.
func (p *findParser) parseEntry(b []byte) ([]byte, error) {
	var f [findFields][]byte
	fields := f[:]
	if p.namesOnly {
		fields = f[:2]
	}
	rest := b
	for i := range fields {
		j := bytes.IndexByte(rest, 0)
		if j < 0 {
			return nil, nil
		}
		f[i], rest = rest[:j:j], rest[j+1:]
	}
	if len(rest) == 0 {
		rest = b[len(b):] // complete, nothing follows: not nil
	}
	if p.namesOnly {
		name, y := f[0], f[1]
		if len(name) == 0 || len(name) > maxFindField || bytes.IndexByte(name, '/') >= 0 || len(y) != 1 {
			return nil, fmt.Errorf("find: malformed entry %q", name)
		}
		p.d.name, p.d.link = name, nil
		p.d.st = sftp.FileStat{Mode: modeUnknown | typeBits(y[0])}
		return rest, nil
	}
	name, tm, link := f[0], f[1], f[6]
	if len(name) == 0 || len(name) > maxFindField || len(link) > maxFindField || bytes.IndexByte(name, '/') >= 0 || len(tm) < 2 {
		return nil, fmt.Errorf("find: malformed entry %q", name)
	}
	perm, ok1 := parseUint(tm[1:], 8, 0o7777)
	size, ok2 := parseInt(f[2])
	secs := f[3]
	if j := bytes.IndexByte(secs, '.'); j >= 0 {
		secs = secs[:j]
	}
	mtime, ok3 := parseInt(secs)
	uid, ok4 := parseUint(f[4], 10, 1<<32-1)
	gid, ok5 := parseUint(f[5], 10, 1<<32-1)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, fmt.Errorf("find: malformed entry %q", name)
	}
	typ := typeBits(tm[0])
	p.d.name = name
	p.d.st = sftp.FileStat{Size: uint64(size), Mode: typ | uint32(perm), Mtime: uint32(mtime), UID: uint32(uid), GID: uint32(gid)}
	p.d.link = nil
	if typ == sIFLNK {
		p.d.link = link
	}
	return rest, nil
}

// typeBits maps find's %y letter to st_mode's type bits (0 for one it does not know).
func typeBits(y byte) uint32 {
	switch y {
	case 'f':
		return sIFREG
	case 'd':
		return sIFDIR
	case 'l':
		return sIFLNK
	case 'p':
		return sIFIFO
	case 's':
		return sIFSOCK
	case 'c':
		return sIFCHR
	case 'b':
		return sIFBLK
	}
	return 0
}

// parseUint parses b as an unsigned number in base (8 or 10) no larger than limit.
func parseUint(b []byte, base, limit uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		d := uint64(c - '0')
		if d >= base || n > (limit-d)/base {
			return 0, false
		}
		n = n*base + d
	}
	return n, true
}

// parseInt parses b as a decimal int64 with an optional sign.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && (b[0] == '-' || b[0] == '+')
	if neg {
		neg, b = b[0] == '-', b[1:]
	}
	n, ok := parseUint(b, 10, 1<<63)
	switch {
	case !ok || !neg && n == 1<<63:
		return 0, false
	case neg:
		return -int64(n), true
	}
	return int64(n), true
}
