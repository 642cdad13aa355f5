package service

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrDataDirUnsafe is wrapped by the error for a data directory that group or other users can
// write.
var ErrDataDirUnsafe = errors.New("data directory is writable by group or other users")

// checkDataDir creates the data directory dir with mode 0700 (and any missing parents) if it
// does not exist, and refuses one that group or other users can write: they could replace the
// database or the generated secrets in it.
func checkDataDir(dir string) (fs.FileInfo, error) {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("data dir: %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("data dir %s has mode %04o: %w (they could replace its database or secrets); run chmod 700 %s",
			dir, perm, ErrDataDirUnsafe, dir)
	}
	return fi, nil
}

// PrepareDataDir makes dir ready for the service: created with mode 0700 if missing, refused
// (ErrDataDirUnsafe) if group or other users can write it. Earlier versions created the SQLite
// files 0644, and an operator may have made dir 0755; so if this process owns dir and group or
// other users can read or search it, it becomes 0700, and each of the SQLite files databases
// (with their -wal and -shm files) that this process owns and group or other users can read
// becomes 0600. It returns what it changed, for the caller to log. Generated secrets are not
// tightened: they were always created 0600, so an open one means someone changed it, and loading
// it fails naming the fix.
func PrepareDataDir(dir string, databases ...string) (tightened []string, err error) {
	fi, err := checkDataDir(dir)
	if err != nil {
		return nil, err
	}
	uid := os.Geteuid()
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && owner(fi) == uid {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		tightened = append(tightened, dir)
	}
	for _, db := range databases {
		for _, p := range []string{db, db + "-wal", db + "-shm"} {
			fi, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return tightened, fmt.Errorf("data dir: %w", err)
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 || owner(fi) != uid {
				continue
			}
			if err := os.Chmod(p, 0o600); err != nil {
				return tightened, fmt.Errorf("data dir: %w", err)
			}
			tightened = append(tightened, p)
		}
	}
	return tightened, nil
}

// owner is the uid that owns the file fi describes, or -1 when unknown.
func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
