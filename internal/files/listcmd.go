package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

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
)

// maxFindField bounds one field of find's output: names are at most 255 bytes and link
// targets PATH_MAX; anything longer is not find's output.
const maxFindField = 16 << 10

// errFindUnusable marks a find that could not list the directory before printing anything:
// the caller falls back to SFTP, which also classifies real errors (missing, not a directory).
var errFindUnusable = errors.New("find -printf unusable")

// findInfos lists directory dir with one `find -printf` on the server, calling fn for each
// entry with an os.FileInfo whose Sys is a *sftp.FileStat (as SFTP's would be) and which
// carries the symlink target. It returns errFindUnusable when fn was never called (no GNU
// find, unreadable or empty directory, not a directory, no command runner).
func (f *FS) findInfos(ctx context.Context, dir string, fn func(os.FileInfo) error) error {
	if f.run == nil {
		return errFindUnusable
	}
	p := &findParser{fn: fn}
	stderr := &cappedBuffer{max: maxCommandOutput}
	cmd := shell.Command("find", "-H", dir, "-mindepth", "1", "-maxdepth", "1", "-printf", findFormat)
	status, err := f.run.Run(ctx, cmd, nil, p, stderr)
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if p.entries == 0 {
		// Nothing listed: find failed, or dir is empty or not a directory at all (find prints
		// nothing for a file). SFTP tells these apart, cheaply since nothing is to be read.
		return errFindUnusable
	}
	if err == nil && status == 0 && p.err == nil && len(p.fields) == 0 && len(p.cur) == 0 {
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

// findParser is the io.Writer find's stdout goes to: it splits NUL-terminated fields and hands
// each complete entry to fn, holding at most one entry.
type findParser struct {
	fn      func(os.FileInfo) error
	cur     []byte   // the field being read
	fields  []string // complete fields of the entry being read
	entries int      // entries handed to fn
	err     error    // first parse or fn error: later output is ignored
}

// Write implements io.Writer. It never fails, so the command runs to its end; the first error
// is kept in p.err.
func (p *findParser) Write(b []byte) (int, error) {
	n := len(b)
	for p.err == nil && len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			p.cur = append(p.cur, b...)
			if len(p.cur) > maxFindField {
				p.err = errors.New("find: field too long")
			}
			break
		}
		p.cur = append(p.cur, b[:i]...)
		b = b[i+1:]
		p.fields = append(p.fields, string(p.cur))
		p.cur = p.cur[:0]
		if len(p.fields) == findFields {
			fi, err := parseFindEntry(p.fields)
			if err == nil {
				p.entries++
				err = p.fn(fi)
			}
			p.err = err
			p.fields = p.fields[:0]
		}
	}
	return n, nil
}

// parseFindEntry turns one entry's fields into a findInfo.
func parseFindEntry(fl []string) (*findInfo, error) {
	name, tm, sizeS, mtimeS, uidS, gidS, link := fl[0], fl[1], fl[2], fl[3], fl[4], fl[5], fl[6]
	if name == "" || strings.ContainsRune(name, '/') || len(tm) < 2 {
		return nil, fmt.Errorf("find: malformed entry %q", name)
	}
	perm, err1 := strconv.ParseUint(tm[1:], 8, 32)
	size, err2 := strconv.ParseInt(sizeS, 10, 64)
	secs, _, _ := strings.Cut(mtimeS, ".")
	mtime, err3 := strconv.ParseInt(secs, 10, 64)
	uid, err4 := strconv.ParseUint(uidS, 10, 32)
	gid, err5 := strconv.ParseUint(gidS, 10, 32)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || perm > 0o7777 {
		return nil, fmt.Errorf("find: malformed entry %q: %w", name, err)
	}
	var typ uint32
	switch tm[0] {
	case 'f':
		typ = sIFREG
	case 'd':
		typ = sIFDIR
	case 'l':
		typ = sIFLNK
	case 'p':
		typ = sIFIFO
	case 's':
		typ = sIFSOCK
	case 'c':
		typ = sIFCHR
	case 'b':
		typ = sIFBLK
	default:
		typ = 0 // unknown: reported as "other"
	}
	fi := &findInfo{name: name, st: sftp.FileStat{Size: uint64(size), Mode: typ | uint32(perm), Mtime: uint32(mtime), UID: uint32(uid), GID: uint32(gid)}}
	if typ == sIFLNK {
		fi.link = link
	}
	fi.mtime = time.Unix(int64(uint32(mtime)), 0) // SFTP v3 carries 32 bits: the same time as READDIR
	return fi, nil
}

// findInfo is an os.FileInfo from find's output; Sys returns the *sftp.FileStat.
type findInfo struct {
	name  string
	st    sftp.FileStat
	mtime time.Time
	link  string
}

func (i *findInfo) Name() string       { return i.name }
func (i *findInfo) Size() int64        { return int64(i.st.Size) }
func (i *findInfo) Mode() os.FileMode  { return i.st.FileMode() }
func (i *findInfo) ModTime() time.Time { return i.mtime }
func (i *findInfo) IsDir() bool        { return i.Mode().IsDir() }
func (i *findInfo) Sys() any           { return &i.st }

// linkTarget returns the symlink target find reported.
func (i *findInfo) linkTarget() string { return i.link }
