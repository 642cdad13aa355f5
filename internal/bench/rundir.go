package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
)

// RunDirName is a directory name for one run alone: prefix-<pid>-<12 random hex digits>, so that
// runs in other processes, or earlier and later runs of this one, never pick the same name.
func RunDirName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (it panics if the system has no randomness)
	return fmt.Sprintf("%s-%d-%s", prefix, os.Getpid(), hex.EncodeToString(b[:]))
}

// OpenRunDir creates a directory for this run alone under RemoteDir on Src through the API
// (mkdir without parents, so an existing directory is never shared), points RemoteDir at it, and
// returns the function that deletes that directory, and nothing else, through the API. It is for
// benches whose RemoteDir is shared (the --url bench's default /tmp): uploads and downloads then
// never meet another run's files, and the file is not left behind. System-to-system runs write
// to Dst under the same RemoteDir, which OpenRunDir does not create there.
func (b *TransferBench) OpenRunDir(ctx context.Context) (func(context.Context) error, error) {
	parent := strings.TrimSpace(b.RemoteDir)
	if !path.IsAbs(parent) {
		return nil, fmt.Errorf("remote dir %q: want an absolute path", b.RemoteDir)
	}
	dir := path.Join(parent, RunDirName("sshapi-bench"))
	mkdir := "/v1/systems/" + url.PathEscape(b.Src.System) + "/ops/mkdir"
	if err := b.API.Call(ctx, http.MethodPost, mkdir, map[string]any{"path": dir, "parents": false}, http.StatusOK, nil); err != nil {
		return nil, fmt.Errorf("create run directory %s: %w", dir, err)
	}
	b.RemoteDir = dir
	del := "/v1/systems/" + url.PathEscape(b.Src.System) + "/files" + escapePath(dir) + "?recursive=true"
	return func(ctx context.Context) error {
		if err := b.API.Call(ctx, http.MethodDelete, del, nil, http.StatusNoContent, nil); err != nil {
			return fmt.Errorf("remove run directory %s: %w", dir, err)
		}
		return nil
	}, nil
}
