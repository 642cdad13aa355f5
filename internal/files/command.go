package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/sshapi/sshapi/internal/digest"
	"github.com/sshapi/sshapi/internal/shell"
)

// maxCommandOutput caps what is kept of a command's stdout and stderr.
const maxCommandOutput = 64 << 10

// cappedBuffer keeps the first max bytes written to it and discards the rest.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

// Write implements io.Writer; it never fails, so a chatty command is not cut off.
func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// command runs argv on the server for op on p and returns its stdout. A nonzero exit status
// is an error classified from the command's stderr.
func (f *FS) command(ctx context.Context, op, p string, argv ...string) ([]byte, error) {
	if f.run == nil {
		return nil, newErr(op, p, errors.ErrUnsupported, errors.New("no command runner configured"))
	}
	if err := checkCtx(ctx, op, p); err != nil {
		return nil, err
	}
	stdout := &cappedBuffer{max: maxCommandOutput}
	stderr := &cappedBuffer{max: maxCommandOutput}
	status, err := f.run.Run(ctx, shell.Command(argv...), nil, stdout, stderr)
	if err != nil {
		return nil, wrap(op, p, err)
	}
	if status == 0 {
		return stdout.buf.Bytes(), nil
	}
	msg := strings.TrimSpace(stderr.buf.String())
	cause := fmt.Errorf("%s exited with status %d: %s", argv[0], status, msg)
	if status == 127 {
		return nil, newErr(op, p, errors.ErrUnsupported, cause)
	}
	return nil, &Error{Op: op, Path: p, Kind: classifyText(msg), Err: cause}
}

// ReadRunner runs commands that only read, and so may run twice, the cheapest way the server
// allows (command.Exec: on a connection's shared shell, one process per command). A Runner
// that also implements it is used so for the checksums of small files.
type ReadRunner interface {
	// RunRead runs argv under LC_ALL=C with stdin from /dev/null and returns its stdout with
	// stderr merged into it, and its exit status.
	RunRead(ctx context.Context, argv ...string) (out []byte, exitStatus int, err error)
}

// readCommand runs argv for op on p with RunRead when the runner has it, and otherwise as
// command does. Its output is stdout and stderr merged (with command: stdout alone), and a
// nonzero exit status is an error classified from that output.
func (f *FS) readCommand(ctx context.Context, op, p string, argv ...string) ([]byte, error) {
	rr, ok := f.run.(ReadRunner)
	if !ok {
		return f.command(ctx, op, p, argv...)
	}
	if err := checkCtx(ctx, op, p); err != nil {
		return nil, err
	}
	out, status, err := rr.RunRead(ctx, argv...)
	switch {
	case err != nil:
		return nil, wrap(op, p, err)
	case status == 0:
		return out, nil
	}
	msg := strings.TrimSpace(string(out))
	cause := fmt.Errorf("%s exited with status %d: %s", argv[0], status, truncateUTF8(msg, maxCommandOutput))
	if status == 127 {
		return nil, newErr(op, p, errors.ErrUnsupported, cause)
	}
	return nil, &Error{Op: op, Path: p, Kind: classifyText(msg), Err: cause}
}

// CopyOptions controls Copy.
type CopyOptions struct {
	// Recursive copies directories with their contents.
	Recursive bool
	// Overwrite allows an existing destination (files are replaced, directories merged).
	Overwrite bool
	// Dereference copies what symlinks point to instead of the links. With a RootDir only the
	// source itself is dereferenced (cp -H), since links below it may lead outside the root.
	Dereference bool
}

// Copy copies src to dst on the server with `cp` (the data never passes through sshapi). dst
// is the new name itself, never a directory to copy into (cp -T).
func (f *FS) Copy(ctx context.Context, src, dst string, opts CopyOptions) error {
	const op = "copy"
	from, err := f.resolve(ctx, op, src, opts.Dereference)
	if err != nil {
		return err
	}
	to, err := f.resolve(ctx, op, dst, false)
	if err != nil {
		return err
	}
	fromEntry, err := f.stat(ctx, op, from, opts.Dereference)
	if err != nil {
		return err
	}
	srcDir := fromEntry.Type == TypeDir
	switch {
	case srcDir && !opts.Recursive:
		return newErr(op, from, ErrIsDir, errors.New("copying a directory needs recursive"))
	case fromEntry.Type == TypeOther && !opts.Recursive:
		// cp would read a FIFO or device (and block); cp -R recreates it instead.
		return newErr(op, from, ErrInvalid, errors.New("not a regular file"))
	}
	if fi, ok, err := f.exists(to); err != nil {
		return f.dirAwareErr(op, to, err)
	} else if ok {
		switch {
		case !opts.Overwrite:
			return newErr(op, to, fs.ErrExist, nil)
		case srcDir && !fi.IsDir():
			return newErr(op, to, ErrNotDir, nil)
		case !srcDir && fi.IsDir():
			return newErr(op, to, ErrIsDir, nil)
		}
	}
	argv := []string{"cp"}
	if opts.Recursive {
		argv = append(argv, "-R")
	}
	rt, err := f.confinement(ctx)
	if err != nil {
		return err
	}
	switch {
	case !opts.Dereference:
		argv = append(argv, "-P")
	case rt.Confined():
		argv = append(argv, "-H")
	default:
		argv = append(argv, "-L")
	}
	// --remove-destination: an existing file (or symlink) in the way is unlinked, never opened,
	// so a symlink at the destination cannot lead the copy out of the root.
	argv = append(argv, "--remove-destination", "-T", "--", from, to)
	_, err = f.command(ctx, op, to, argv...)
	return err
}

// Chown changes the owner and/or group of p with `chown`, so names as well as numeric ids are
// accepted. Either may be empty, not both. With recursive, symlinks below p are not followed.
func (f *FS) Chown(ctx context.Context, p, owner, group string, recursive bool) error {
	const op = "chown"
	if owner == "" && group == "" {
		return newErr(op, p, ErrInvalid, errors.New("owner or group required"))
	}
	for _, s := range []string{owner, group} {
		if strings.ContainsAny(s, ":\x00\n") {
			return newErr(op, p, ErrInvalid, fmt.Errorf("bad owner or group %q", s))
		}
	}
	abs, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return err
	}
	if _, err := f.stat(ctx, op, abs, true); err != nil {
		return err
	}
	spec := owner
	if group != "" {
		spec += ":" + group
	}
	argv := []string{"chown"}
	if recursive {
		argv = append(argv, "-R")
	}
	argv = append(argv, "--", spec, abs)
	_, err = f.command(ctx, op, abs, argv...)
	return err
}

// tarFlag returns tar's compression flag for a Compress format.
func tarFlag(format string) (flag string, ok bool) {
	switch format {
	case "tar":
		return "", true
	case "tar.gz":
		return "-z", true
	case "tar.bz2":
		return "-j", true
	case "tar.xz":
		return "-J", true
	}
	return "", false
}

// Compress creates archive from sources with `tar` on the server, each source stored under its
// base name. format is "tar", "tar.gz", "tar.bz2" or "tar.xz". tar writes to a temporary name in
// the archive's directory that is renamed into place when complete; an existing archive is
// refused with fs.ErrExist. Symlinks are archived as links.
func (f *FS) Compress(ctx context.Context, sources []string, archive, format string) error {
	const op = "compress"
	flag, ok := tarFlag(format)
	if !ok {
		return newErr(op, archive, ErrInvalid, fmt.Errorf("unknown archive format %q (want tar, tar.gz, tar.bz2 or tar.xz)", format))
	}
	if len(sources) == 0 {
		return newErr(op, archive, ErrInvalid, errors.New("no sources"))
	}
	dst, err := f.resolve(ctx, op, archive, false)
	if err != nil {
		return err
	}
	if _, ok, err := f.exists(dst); err != nil {
		return f.dirAwareErr(op, dst, err)
	} else if ok {
		return newErr(op, dst, fs.ErrExist, nil)
	}
	// The temporary archive is created before tar runs and excluded by name, so an archive
	// placed inside one of its sources neither contains itself nor makes tar see the directory
	// change while reading it.
	tmp := path.Join(path.Dir(dst), tempName(path.Base(dst)))
	argv := []string{"tar", "-c", "--no-unquote", "--no-wildcards", "--exclude=" + path.Base(tmp)}
	if flag != "" {
		argv = append(argv, flag)
	}
	argv = append(argv, "-f", tmp)
	for _, s := range sources {
		abs, err := f.resolve(ctx, op, s, false)
		if err != nil {
			return err
		}
		if abs == "/" {
			return newErr(op, abs, ErrInvalid, errors.New("cannot archive /"))
		}
		if _, err := f.stat(ctx, op, abs, false); err != nil {
			return err
		}
		// -C is positional; --add-file takes the name as data even when it starts with "-".
		argv = append(argv, "-C", path.Dir(abs), "--add-file="+path.Base(abs))
	}
	gone, err := f.createTracked(ctx, op, dst, tmp)
	if err != nil {
		return err
	}
	file, err := f.createTemp(op, dst, tmp)
	if err != nil {
		f.createFailed(err, gone)
		return err
	}
	if err := file.Close(); err != nil {
		f.removeTemp(tmp, gone)
		return f.writeErr(op, dst, err)
	}
	if _, err := f.command(ctx, op, dst, argv...); err != nil {
		f.removeTemp(tmp, gone) // best effort; the command's error is the one to report
		return err
	}
	if err := f.c.Chmod(tmp, DefaultFileMode); err != nil {
		f.removeTemp(tmp, gone)
		return f.writeErr(op, dst, err)
	}
	if err := f.rename(op, tmp, dst, false); err != nil {
		f.removeTemp(tmp, gone)
		return err
	}
	gone()
	return nil
}

// Checksum returns the hex digest of file p computed on the server (see the digest package): a
// file smaller than digest.BigFile with one command that is one process, the coreutils tool
// (`sha256sum -- FILE`), run on a shared shell where the runner has them (ReadRunner) and
// otherwise in a session of its own (`env LC_ALL=C sha256sum -- FILE`, no shell of its own); a
// bigger one with openssl when it passed its self-test there (Options.Tools remembers that) and
// coreutils otherwise; algorithm is "sha256", "sha512", "sha1" or "md5".
func (f *FS) Checksum(ctx context.Context, p, algorithm string) (string, error) {
	const op = "checksum"
	alg, err := digest.Parse(algorithm)
	if err != nil {
		return "", newErr(op, p, ErrInvalid, err)
	}
	abs, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return "", err
	}
	e, err := f.stat(ctx, op, abs, true)
	if err != nil {
		return "", err
	}
	if err := regularOnly(op, e); err != nil {
		return "", err
	}
	file := []digest.File{{Path: abs, Size: e.Size}}
	run := f.command
	if e.Size < digest.BigFile {
		run = f.readCommand // Argv is the coreutils tool alone: a read, one process
	}
	out, err := run(ctx, op, abs, f.opts.Tools.Argv(alg, file)...)
	if err != nil {
		return "", err
	}
	res := f.opts.Tools.ParseOutput(alg, file, string(out), "")[0]
	if res.Sum == "" {
		return "", &Error{Op: op, Path: abs, Kind: classifyText(res.Err), Err: fmt.Errorf("%s: %s", alg, truncateUTF8(res.Err, 200))}
	}
	return res.Sum, nil
}

// FileType describes the content of p with `file -b` (e.g. "ASCII text"). A symlink is
// described as a link, not followed.
func (f *FS) FileType(ctx context.Context, p string) (string, error) {
	const op = "filetype"
	abs, err := f.resolve(ctx, op, p, false)
	if err != nil {
		return "", err
	}
	if _, err := f.stat(ctx, op, abs, false); err != nil {
		return "", err
	}
	out, err := f.command(ctx, op, abs, "file", "-b", "--", abs)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
