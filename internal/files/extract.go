package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/shell"
)

// Bounds on what Extract remembers about an archive while checking it. Archives beyond them are
// refused with ErrInvalid (extract such trees in parts, or with a command).
const (
	// maxExtractLinks bounds the symlink members of an archive.
	maxExtractLinks = 100_000
	// maxListLine bounds one line of `tar -tv` output.
	maxListLine = 64 << 10
)

// Extract unpacks archive (any format tar recognises) into the existing directory destination
// with `tar` on the server. Nothing is written until the archive's member list (`tar -tv`) has
// been checked: a member with an absolute name or a ".." component, a member written through a
// symlink member, a symlink whose target is absolute or climbs out of the extraction directory,
// a hard link to a symlink, device nodes and named pipes (FIFOs) are refused with ErrInvalid (an
// open of a FIFO blocks until someone opens its other end, and sftp-server serves a channel's
// requests one at a time: one read or upload reaching a FIFO would stall every request on that
// channel, which the owner's grantees and links share). tar then extracts into
// a fresh owner-only directory inside destination, where no existing symlink can lead it
// elsewhere, and the result is merged into destination by renames that never follow a symlink:
// new names are moved in, existing directories (real ones, not links) are merged, existing
// files and links are replaced, a file meeting a directory fails with ErrIsDir or ErrNotDir.
// The temporary directory is removed in every case; a failure while merging leaves what was
// already merged. If the archive is replaced between the check and the extraction, GNU tar's own
// rules (leading "/" and ".." stripped, unsafe symlinks deferred) still keep what it writes
// inside the temporary directory.
func (f *FS) Extract(ctx context.Context, archive, destination string) error {
	const op = "extract"
	src, err := f.resolve(ctx, op, archive, true)
	if err != nil {
		return err
	}
	dst, err := f.resolve(ctx, op, destination, true)
	if err != nil {
		return err
	}
	e, err := f.stat(ctx, op, src, true)
	if err != nil {
		return err
	}
	if e.Type == TypeDir {
		return newErr(op, src, ErrIsDir, nil)
	}
	d, err := f.stat(ctx, op, dst, true)
	if err != nil {
		return err
	}
	if d.Type != TypeDir {
		return newErr(op, dst, ErrNotDir, nil)
	}
	if f.run == nil {
		return newErr(op, src, errors.ErrUnsupported, errors.New("no command runner configured"))
	}
	if err := f.checkArchive(ctx, op, src, dst); err != nil {
		return err
	}
	if err := checkCtx(ctx, op, dst); err != nil {
		return err
	}
	tmp := path.Join(dst, tempName("extract"))
	gone, err := f.createTracked(ctx, op, dst, tmp)
	if err != nil {
		return err
	}
	if err := f.c.Mkdir(tmp); err != nil {
		err = f.createErr(op, tmp, err)
		f.createFailed(err, gone)
		return err
	}
	err = f.chmod(op, tmp, 0o700)
	if err == nil {
		_, err = f.command(ctx, op, dst, "tar", "-x", "--no-same-owner", "-f", src, "-C", tmp)
	}
	if err == nil {
		err = f.merge(ctx, op, tmp, dst)
	}
	if rerr := f.removeTree(context.WithoutCancel(ctx), op, tmp); rerr != nil && err == nil {
		err = rerr
	} else if rerr == nil {
		gone()
	}
	return err
}

// merge moves the entries of directory from into directory to without following symlinks in
// to: new names are renamed in, directories present on both sides are merged, and a file or
// link replaces a file or link.
func (f *FS) merge(ctx context.Context, op, from, to string) error {
	if err := checkCtx(ctx, op, to); err != nil {
		return err
	}
	infos, err := f.c.ReadDirContext(ctx, from)
	if err != nil {
		return wrap(op, from, err)
	}
	for _, fi := range infos {
		src, dst := path.Join(from, fi.Name()), path.Join(to, fi.Name())
		dfi, ok, err := f.exists(dst)
		switch {
		case err != nil:
			return wrap(op, dst, err)
		case !ok:
			err = f.rename(op, src, dst, false)
		case fi.IsDir() && dfi.IsDir(): // Lstat: a real directory, not a link to one
			err = f.merge(ctx, op, src, dst)
		case !fi.IsDir() && !dfi.IsDir():
			err = f.rename(op, src, dst, true)
		case fi.IsDir():
			err = newErr(op, dst, ErrNotDir, errors.New("the archive has a directory where destination has a file"))
		default:
			err = newErr(op, dst, ErrIsDir, errors.New("the archive has a file where destination has a directory"))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkArchive lists src with tar and checks every member (see Extract); failures name dst,
// the directory that would have been written.
func (f *FS) checkArchive(ctx context.Context, op, src, dst string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chk := &memberCheck{links: map[string]bool{}, stop: cancel, downOnly: f.opts.Within != ""}
	stderr := &cappedBuffer{max: maxCommandOutput}
	// -P lists names and link targets as stored: without it GNU tar strips a leading "/" or
	// "../" from hard link targets in the listing too, hiding what is checked here.
	cmd := shell.Command("env", "LC_ALL=C", "tar", "--quoting-style=c", "--numeric-owner", "-P", "-tv", "-f", src)
	status, err := f.run.Run(ctx, cmd, nil, chk, stderr)
	if chk.err == nil && len(chk.partial) > 0 {
		chk.line(string(chk.partial))
	}
	if chk.err != nil {
		return newErr(op, src, ErrInvalid, chk.err)
	}
	if err != nil {
		return wrap(op, dst, err)
	}
	if status != 0 {
		msg := strings.TrimSpace(stderr.buf.String())
		return &Error{Op: op, Path: dst, Kind: classifyText(msg), Err: fmt.Errorf("tar -t exited with status %d: %s", status, msg)}
	}
	return nil
}

// memberCheck reads `tar --quoting-style=c -tv` output as it arrives and stops at the first
// member that Extract refuses.
type memberCheck struct {
	partial []byte
	links   map[string]bool // symlink members seen so far
	err     error
	stop    func()
	// downOnly refuses symlink members that climb (confine.DownwardLink), for an extraction
	// through a grant or a link.
	downOnly bool
}

// Write implements io.Writer; it keeps no more than one line.
func (m *memberCheck) Write(p []byte) (int, error) {
	n := len(p)
	for m.err == nil && len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			m.partial = append(m.partial, p...)
			if len(m.partial) > maxListLine {
				m.fail(fmt.Errorf("a member listing line is longer than %d bytes", maxListLine))
			}
			break
		}
		line := string(append(m.partial, p[:i]...))
		m.partial, p = m.partial[:0], p[i+1:]
		m.line(line)
	}
	return n, nil
}

func (m *memberCheck) fail(err error) {
	if m.err == nil {
		m.err = err
		m.stop()
	}
}

// line checks one member: `MODE UID/GID SIZE DATE TIME "NAME"[ -> "TARGET"| link to "TARGET"]`.
func (m *memberCheck) line(line string) {
	if line == "" || m.err != nil {
		return
	}
	q := strings.IndexByte(line, '"')
	if q < 0 {
		m.fail(fmt.Errorf("unexpected tar listing line %q", truncateUTF8(line, 200)))
		return
	}
	name, rest, err := unquoteC(line[q:])
	if err != nil {
		m.fail(fmt.Errorf("tar listing: %w", err))
		return
	}
	var target string
	switch kind := line[0]; {
	case kind == 'l' && strings.HasPrefix(rest, " -> "):
		target, rest, err = unquoteC(rest[len(" -> "):])
	case kind == 'h' && strings.HasPrefix(rest, " link to "):
		target, rest, err = unquoteC(rest[len(" link to "):])
	case strings.IndexByte("-dC", kind) < 0:
		m.fail(fmt.Errorf("member %q: %s members are not extracted", name, memberKind(kind)))
		return
	}
	if err != nil || rest != "" {
		m.fail(fmt.Errorf("unexpected tar listing line %q", truncateUTF8(line, 200)))
		return
	}
	comps, err := m.memberPath(name)
	if err != nil {
		m.fail(err)
		return
	}
	if len(comps) == 0 && line[0] != 'd' {
		m.fail(fmt.Errorf("member %q names the extraction directory", name))
		return
	}
	switch line[0] {
	case 'l':
		if err := m.linkTarget(name, comps, target); err != nil {
			m.fail(err)
			return
		}
		if len(m.links) >= maxExtractLinks {
			m.fail(fmt.Errorf("more than %d symlinks in the archive", maxExtractLinks))
			return
		}
		m.links[strings.Join(comps, "/")] = true
	case 'h':
		tc, err := m.memberPath(target)
		if err != nil {
			m.fail(fmt.Errorf("hard link %q: %w", name, err))
			return
		}
		if m.links[strings.Join(tc, "/")] {
			m.fail(fmt.Errorf("hard link %q: its target %q is a symlink", name, target))
			return
		}
	}
}

// memberPath splits a member name into its components ("" and "." dropped), refusing absolute
// names, ".." and names below a symlink member.
func (m *memberCheck) memberPath(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("member %q has an absolute name", name)
	}
	var comps []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("member %q has a \"..\" component", name)
		}
		if len(comps) > 0 && m.links[strings.Join(comps, "/")] {
			return nil, fmt.Errorf("member %q would be written through the symlink member %q", name, strings.Join(comps, "/"))
		}
		comps = append(comps, c)
	}
	return comps, nil
}

// linkTarget checks a symlink member's target: relative, and resolving (from the link's
// directory, without passing through another symlink member) inside the extraction directory.
func (m *memberCheck) linkTarget(name string, comps []string, target string) error {
	if target == "" || strings.HasPrefix(target, "/") {
		return fmt.Errorf("symlink %q has an absolute or empty target %q", name, target)
	}
	if m.downOnly {
		if err := confine.DownwardLink(target); err != nil {
			return fmt.Errorf("symlink %q: %w", name, err)
		}
	}
	cur := append([]string(nil), comps[:len(comps)-1]...)
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return fmt.Errorf("symlink %q points out of the extraction directory (%q)", name, target)
			}
			cur = cur[:len(cur)-1]
			continue
		}
		if len(cur) > 0 && m.links[strings.Join(cur, "/")] {
			return fmt.Errorf("symlink %q points through the symlink member %q", name, strings.Join(cur, "/"))
		}
		cur = append(cur, c)
	}
	return nil
}

// memberKind names a tar -tv type letter.
func memberKind(k byte) string {
	switch k {
	case 'c':
		return "character device"
	case 'b':
		return "block device"
	case 'p':
		return "named pipe (FIFO)"
	}
	return fmt.Sprintf("type %q", k)
}

// unquoteC reads one string in GNU quoting style "c" from the start of s and returns it and
// what follows the closing quote.
func unquoteC(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", errors.New("expected a quoted name")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), s[i+1:], nil
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			break
		}
		i++
		switch e := s[i]; e {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '"', '?', '\'':
			b.WriteByte(e)
		default:
			if e < '0' || e > '7' || i+2 >= len(s) {
				return "", "", fmt.Errorf("bad escape in %q", truncateUTF8(s, 200))
			}
			v := 0
			for _, d := range []byte(s[i : i+3]) {
				if d < '0' || d > '7' {
					return "", "", fmt.Errorf("bad octal escape in %q", truncateUTF8(s, 200))
				}
				v = v*8 + int(d-'0')
			}
			if v > 0xff {
				return "", "", fmt.Errorf("bad octal escape in %q", truncateUTF8(s, 200))
			}
			b.WriteByte(byte(v))
			i += 2
		}
	}
	return "", "", errors.New("unterminated quoted name")
}
