package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/client"
)

// uploadState is what put keeps about an unfinished resumable upload, so that the same command
// run again continues it instead of starting over: one JSON file per service, system, remote
// path, local size and modification time in the user cache dir (sshapi/uploads/), removed once
// the upload finished or cannot be continued.
type uploadState struct {
	// URL is the upload's tus URL (path) on the service.
	URL     string    `json:"url"`
	Service string    `json:"service"`
	System  string    `json:"system"`
	Path    string    `json:"path"`
	Local   string    `json:"local"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	Created time.Time `json:"created"`
}

// uploadStateFile is where the state of an upload of a local file of size bytes modified at
// mtime to system:p on the service at svc is kept.
func uploadStateFile(svc, system, p string, size int64, mtime time.Time) (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("resume state: %w", err)
	}
	key := sha256.Sum256([]byte(svc + "\x00" + system + "\x00" + p + "\x00" + strconv.FormatInt(size, 10) + "\x00" + strconv.FormatInt(mtime.UnixNano(), 10)))
	return filepath.Join(dir, "sshapi", "uploads", hex.EncodeToString(key[:16])+".json"), nil
}

// readUploadState returns the state kept in file, or nil when there is none (or it is not
// readable: it is then ignored and replaced).
func readUploadState(file string) *uploadState {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var st uploadState
	if json.Unmarshal(b, &st) != nil || st.URL == "" {
		return nil
	}
	return &st
}

// writeUploadState stores st in file (0600: the URL names the user's upload).
func writeUploadState(file string, st *uploadState) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("resume state: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("resume state: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("resume state: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("resume state: %w", err)
	}
	return nil
}

// putResumable uploads f (described by fi) to dst through the tus endpoint, continuing the
// upload an interrupted earlier run of the same put left (see uploadState).
func putResumable(cmd *cobra.Command, c *client.Client, o getPutOptions, f *os.File, fi os.FileInfo, sum string, dst remote, bar *progressbar.ProgressBar) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	stateFile, err := uploadStateFile(c.URL, dst.system, dst.path, fi.Size(), fi.ModTime())
	if err != nil {
		fmt.Fprintf(stderr, "put: %v; an interrupted upload will not be continued by running put again\n", err)
	}
	opts := client.ResumableOptions{SHA256: sum, Overwrite: !o.noClobber, Retries: o.retries, ChunkSize: o.chunkSize,
		Sent: func(off int64) {
			if bar != nil {
				_ = bar.Set64(off)
			}
		}}
	if stateFile != "" {
		if st := readUploadState(stateFile); st != nil {
			opts.URL = st.URL
			if !o.progress.quiet {
				fmt.Fprintf(stderr, "put: continuing the upload an earlier run left (%s)\n", st.URL)
			}
		}
		local, _ := filepath.Abs(f.Name())
		opts.Created = func(u string) {
			st := &uploadState{URL: u, Service: c.URL, System: dst.system, Path: dst.path, Local: local, Size: fi.Size(), ModTime: fi.ModTime(), Created: time.Now().UTC()}
			if err := writeUploadState(stateFile, st); err != nil {
				fmt.Fprintf(stderr, "put: %v; an interrupted upload will not be continued by running put again\n", err)
			}
		}
	}
	err = c.UploadResumable(ctx, dst.system, dst.path, f, fi.Size(), opts)
	if errors.Is(err, client.ErrUploadGone) {
		// expired, terminated or failed since: start over
		if !o.progress.quiet {
			fmt.Fprintf(stderr, "put: the earlier upload is gone from the service (%v); starting over\n", err)
		}
		opts.URL = ""
		err = c.UploadResumable(ctx, dst.system, dst.path, f, fi.Size(), opts)
	}
	var interrupted *client.InterruptedError
	switch {
	case err == nil:
		if bar != nil {
			_ = bar.Finish()
		}
	case errors.As(err, &interrupted) && stateFile != "":
		return fmt.Errorf("put %s: %w; run the same command again to continue from there", dst, err)
	case client.IsStatus(err, http.StatusUnprocessableEntity):
		err = fmt.Errorf("put %s: the server received different bytes (file changed while uploading?); nothing was written: %w", dst, err)
	case ctx.Err() != nil && stateFile != "":
		return fmt.Errorf("put %s: %w; run the same command again to continue", dst, err)
	case client.IsStatus(err, http.StatusNotFound), client.IsStatus(err, http.StatusGone):
		err = fmt.Errorf("put %s: %w", dst, err)
	default:
		return fmt.Errorf("put %s: %w", dst, err) // the state stays: a later run may continue
	}
	if stateFile != "" {
		if rerr := os.Remove(stateFile); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			fmt.Fprintf(stderr, "put: %v\n", rerr)
		}
	}
	return err
}
