package files

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/pkg/sftp"
)

// Channels opens SSH subsystem channels of their own (command.Exec implements it). FS uses one
// to read a large directory batch by batch: pkg/sftp's ReadDir returns a directory only whole,
// which for millions of entries is hundreds of megabytes held by one request.
type Channels interface {
	OpenSubsystem(ctx context.Context, name string) (io.ReadWriteCloser, error)
}

// SFTP protocol version 3 (draft-ietf-secsh-filexfer-02): the few packets a directory read needs.
const (
	fxpInit     = 1
	fxpVersion  = 2
	fxpClose    = 4
	fxpOpendir  = 11
	fxpReaddir  = 12
	fxpStatus   = 101
	fxpHandle   = 102
	fxpName     = 104
	fxEOF       = 1
	fxNoSuch    = 2
	fxPermDeny  = 3
	attrSize    = 0x1
	attrUIDGID  = 0x2
	attrPerm    = 0x4
	attrTimes   = 0x8
	attrExt     = 0x80000000
	maxDirReply = 1 << 20 // a READDIR reply larger than this is refused (OpenSSH sends ~100 names)
)

// dirStream reads one directory over its own SFTP channel, one READDIR batch at a time.
type dirStream struct {
	rw     io.ReadWriteCloser
	r      *bufio.Reader
	id     uint32
	handle string
	opened bool
	stop   func() bool
	body   []byte // the last reply, reused
	ent    dirent // the entry handed to next's callback
}

// openDirStream starts an SFTP session on a channel of its own and opens dir. ctx ending
// closes the channel, which ends any read in progress.
func openDirStream(ctx context.Context, ch Channels, dir string) (*dirStream, error) {
	rw, err := ch.OpenSubsystem(ctx, "sftp")
	if err != nil {
		return nil, err
	}
	d := &dirStream{rw: rw, r: bufio.NewReaderSize(rw, 64<<10)}
	d.stop = context.AfterFunc(ctx, func() { _ = rw.Close() })
	if err := d.send(fxpInit, binary.BigEndian.AppendUint32(nil, 3), false); err != nil {
		d.close()
		return nil, err
	}
	if typ, _, err := d.recv(); err != nil || typ != fxpVersion {
		d.close()
		return nil, errors.Join(fmt.Errorf("sftp init: unexpected reply %d", typ), err)
	}
	if err := d.send(fxpOpendir, appendString(nil, dir), true); err != nil {
		d.close()
		return nil, err
	}
	typ, body, err := d.recv()
	if err == nil {
		if typ == fxpHandle {
			d.handle, _, err = readString(body)
			d.opened = err == nil
		} else {
			err = statusErr(typ, body)
		}
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// next hands the next batch of entries (without "." and "..") to fn, or returns io.EOF after
// the last. An error of fn is returned as a callbackError.
func (d *dirStream) next(fn func(*dirent) error) error {
	if err := d.send(fxpReaddir, appendString(nil, d.handle), true); err != nil {
		return err
	}
	typ, body, err := d.recv()
	if err != nil {
		return err
	}
	if typ != fxpName {
		return statusErr(typ, body)
	}
	count, body, err := readUint32(body)
	if err != nil {
		return err
	}
	for range count {
		var name []byte
		if name, body, err = readBytes(body); err != nil {
			return err
		}
		if _, body, err = readBytes(body); err != nil { // long name, ls -l style: unused
			return err
		}
		d.ent.st = sftp.FileStat{}
		if body, err = readAttrs(body, &d.ent.st); err != nil {
			return err
		}
		if string(name) == "." || string(name) == ".." {
			continue
		}
		if len(name) == 0 || bytes.IndexByte(name, '/') >= 0 {
			name = []byte(path.Base(string(name))) // not from a well-behaved server
		}
		d.ent.name, d.ent.link = name, nil
		if err := fn(&d.ent); err != nil {
			return callbackError{err}
		}
	}
	return nil
}

// close closes the handle (without waiting for the answer) and the channel.
func (d *dirStream) close() {
	if d.opened {
		_ = d.send(fxpClose, appendString(nil, d.handle), true)
	}
	d.stop()
	_ = d.rw.Close()
}

func (d *dirStream) send(typ byte, payload []byte, withID bool) error {
	n := 1 + len(payload)
	if withID {
		n += 4
	}
	pkt := binary.BigEndian.AppendUint32(make([]byte, 0, 4+n), uint32(n))
	pkt = append(pkt, typ)
	if withID {
		d.id++
		pkt = binary.BigEndian.AppendUint32(pkt, d.id)
	}
	_, err := d.rw.Write(append(pkt, payload...))
	return err
}

// recv reads one reply and returns its type and body after the request id (VERSION has none).
func (d *dirStream) recv() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("sftp read: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < 1 || n > maxDirReply {
		return 0, nil, fmt.Errorf("sftp read: reply of %d bytes", n)
	}
	if cap(d.body) < int(n-1) {
		d.body = make([]byte, n-1)
	}
	body := d.body[:n-1]
	if _, err := io.ReadFull(d.r, body); err != nil {
		return 0, nil, fmt.Errorf("sftp read: %w", err)
	}
	if hdr[4] == fxpVersion {
		return hdr[4], body, nil
	}
	id, body, err := readUint32(body)
	if err == nil && id != d.id {
		err = fmt.Errorf("sftp read: reply to request %d, want %d", id, d.id)
	}
	return hdr[4], body, err
}

// statusErr turns a STATUS reply into io.EOF or an error files classifies like pkg/sftp's.
func statusErr(typ byte, body []byte) error {
	if typ != fxpStatus {
		return fmt.Errorf("sftp: unexpected reply type %d", typ)
	}
	code, rest, err := readUint32(body)
	if err != nil {
		return err
	}
	msg, _, _ := readString(rest)
	switch code {
	case fxEOF:
		return io.EOF
	case fxNoSuch:
		return fmt.Errorf("%s: %w", msg, fs.ErrNotExist)
	case fxPermDeny:
		return fmt.Errorf("%s: %w", msg, fs.ErrPermission)
	}
	return fmt.Errorf("%s: %w", msg, &sftp.StatusError{Code: code})
}

var errShort = errors.New("sftp: short packet")

func readUint32(b []byte) (uint32, []byte, error) {
	if len(b) < 4 {
		return 0, nil, errShort
	}
	return binary.BigEndian.Uint32(b), b[4:], nil
}

func readString(b []byte) (string, []byte, error) {
	s, b, err := readBytes(b)
	return string(s), b, err
}

// readBytes reads a string as a sub-slice of b.
func readBytes(b []byte) ([]byte, []byte, error) {
	n, b, err := readUint32(b)
	if err != nil || uint32(len(b)) < n {
		return nil, nil, errShort
	}
	return b[:n:n], b[n:], nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// readAttrs decodes an ATTRS structure into st.
func readAttrs(b []byte, st *sftp.FileStat) ([]byte, error) {
	flags, b, err := readUint32(b)
	if err != nil {
		return nil, err
	}
	if flags&attrSize != 0 {
		if len(b) < 8 {
			return nil, errShort
		}
		st.Size, b = binary.BigEndian.Uint64(b), b[8:]
	}
	if flags&attrUIDGID != 0 {
		if st.UID, b, err = readUint32(b); err != nil {
			return nil, err
		}
		if st.GID, b, err = readUint32(b); err != nil {
			return nil, err
		}
	}
	if flags&attrPerm != 0 {
		if st.Mode, b, err = readUint32(b); err != nil {
			return nil, err
		}
	}
	if flags&attrTimes != 0 {
		if st.Atime, b, err = readUint32(b); err != nil {
			return nil, err
		}
		if st.Mtime, b, err = readUint32(b); err != nil {
			return nil, err
		}
	}
	if flags&attrExt != 0 {
		var n uint32
		if n, b, err = readUint32(b); err != nil {
			return nil, err
		}
		for range n {
			if _, b, err = readString(b); err != nil {
				return nil, err
			}
			if _, b, err = readString(b); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}
