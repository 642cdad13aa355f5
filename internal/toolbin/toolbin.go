// Package toolbin builds the real servers sshapi's tests and benchmarks run (versitygw, an
// OpenID Connect provider) from their own small modules under tools/, so that their
// dependencies stay out of sshapi's go.mod, into build/bin/ under sshapi's module root.
//
// Test binaries of several packages run at once: a process-wide mutex and a file lock in the
// tool's directory make one of them build while the others wait, and a binary newer than its
// sources is used as it is.
package toolbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

var buildMu sync.Mutex

// Binary returns build/bin/<name>, building `go build -o … pkg` in tools/<name> when it is
// missing or older than any of sources (files in tools/<name>). $<env>, when set, names a
// binary to use instead.
func Binary(name, env, pkg string, sources ...string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "tools", name)
	bin := filepath.Join(root, "build", "bin", name)
	buildMu.Lock()
	defer buildMu.Unlock()
	lock, err := os.OpenFile(filepath.Join(src, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("build %s: lock: %w", name, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	paths := make([]string, len(sources))
	for i, s := range sources {
		paths[i] = filepath.Join(src, s)
	}
	if fresh(bin, paths...) {
		return bin, nil
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w: %s", name, err, out)
	}
	return bin, nil
}

// fresh reports whether bin exists and is newer than every one of srcs.
func fresh(bin string, srcs ...string) bool {
	b, err := os.Stat(bin)
	if err != nil {
		return false
	}
	for _, src := range srcs {
		s, err := os.Stat(src)
		if err != nil || !b.ModTime().After(s.ModTime()) {
			return false
		}
	}
	return true
}

// ModuleRoot finds sshapi's module root at or above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/sshapi/sshapi\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("sshapi's module root not found at or above the working directory")
		}
		dir = parent
	}
}
