package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/client"
)

type getPutOptions struct {
	progress  progressOptions
	noVerify  bool
	noClobber bool
	resumable bool
	retries   int
	chunkSize int64
}

func (o *getPutOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&o.progress.quiet, "quiet", "q", false, "no progress bar")
	cmd.Flags().BoolVar(&o.progress.force, "progress", false, "draw the progress bar even when stderr is not a terminal")
	cmd.Flags().BoolVar(&o.noVerify, "no-verify", false, "skip the SHA-256 comparison (put: the server does not hash the upload either)")
}

func newGetCmd() *cobra.Command {
	var o getPutOptions
	cmd := &cobra.Command{
		Use:               "get SYSTEM:PATH LOCAL",
		Short:             "Download a remote file (LOCAL may be a directory, or - for stdout); verified by SHA-256",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeRemote,
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := mustRemote(args[0])
			if err != nil {
				return err
			}
			c, err := apiClient()
			if err != nil {
				return err
			}
			return runGet(cmd, c, o, src, args[1])
		},
	}
	o.addFlags(cmd)
	return cmd
}

func runGet(cmd *cobra.Command, c *client.Client, o getPutOptions, src remote, local string) error {
	ctx := cmd.Context()
	body, size, err := c.Open(ctx, src.system, src.path)
	if err != nil {
		return fmt.Errorf("get %s: %w", src, err)
	}
	defer body.Close()
	if local == "-" {
		_, err := io.Copy(cmd.OutOrStdout(), body)
		return err
	}
	if st, err := os.Stat(local); (err == nil && st.IsDir()) || strings.HasSuffix(local, string(os.PathSeparator)) {
		local = filepath.Join(local, path.Base(src.path))
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".sshapi-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename this removes nothing
	h := sha256.New()
	bar := o.progress.newBar(cmd.ErrOrStderr(), size, filepath.Base(local))
	_, err = io.Copy(barWriter(io.MultiWriter(tmp, h), bar), body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("get %s: %w", src, err)
	}
	if !o.noVerify {
		want, err := c.Checksum(ctx, src.system, src.path)
		if err != nil {
			return fmt.Errorf("get %s: checksum: %w", src, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("get %s: SHA-256 mismatch: downloaded %s, server has %s (changed while downloading?)", src, got, want)
		}
	}
	return os.Rename(tmp.Name(), local)
}

func newPutCmd() *cobra.Command {
	var o getPutOptions
	cmd := &cobra.Command{
		Use:   "put LOCAL SYSTEM:PATH",
		Short: "Upload a local file (PATH may be a directory); written atomically and verified by SHA-256",
		Long: `Upload a local file (PATH may be a directory); written atomically and verified by SHA-256.

Files of 64 MiB and more, and any file with --resumable, go through the service's resumable
(tus) endpoint in requests of --chunk-size bytes: after a dropped connection put asks the server
how many bytes it committed and sends only the rest (up to --retries failed requests in a row).
If put gives up or is interrupted, running the same command again with the same file (same size
and modification time) continues the upload: its URL is kept in the user cache directory
(sshapi/uploads/) until the upload finishes or the service forgets it (http.tus_expiry, 24h
by default; put then starts over).`,
		Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return nil, cobra.ShellCompDirectiveDefault
			}
			return completeRemote(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dst, err := mustRemote(args[1])
			if err != nil {
				return err
			}
			c, err := apiClient()
			if err != nil {
				return err
			}
			return runPut(cmd, c, o, args[0], dst)
		},
	}
	o.addFlags(cmd)
	cmd.Flags().BoolVarP(&o.noClobber, "no-clobber", "n", false, "fail if the remote file exists")
	cmd.Flags().BoolVar(&o.resumable, "resumable", false, fmt.Sprintf("upload through the resumable (tus) endpoint (always for files of %d MiB and more): "+
		"after a lost connection it continues from the bytes the server committed, and an interrupted put continues when run again "+
		"with the same file (same size and modification time) and destination (state kept under the user cache dir, sshapi/uploads)", resumableFrom>>20))
	cmd.Flags().IntVar(&o.retries, "retries", 5, "resumable uploads: failed requests in a row to retry before giving up (run the command again to continue)")
	cmd.Flags().Int64Var(&o.chunkSize, "chunk-size", client.DefaultChunkSize, "resumable uploads: most bytes per request (PATCH)")
	return cmd
}

// resumableFrom is the size from which put uploads through the resumable (tus) endpoint.
const resumableFrom = 64 << 20

func runPut(cmd *cobra.Command, c *client.Client, o getPutOptions, local string, dst remote) error {
	ctx := cmd.Context()
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory: upload it with an archive or `sshapi transfer`", local)
	}
	if dst.path == "" || strings.HasSuffix(dst.path, "/") {
		dst.path += filepath.Base(local)
	} else if e, err := c.Stat(ctx, dst.system, dst.path); err == nil && e.Type == "dir" {
		dst.path = path.Join(dst.path, filepath.Base(local))
	} else if err != nil && !client.IsStatus(err, http.StatusNotFound) {
		return fmt.Errorf("put %s: %w", dst, err)
	}
	sum := ""
	if !o.noVerify {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		sum = hex.EncodeToString(h.Sum(nil))
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	bar := o.progress.newBar(cmd.ErrOrStderr(), st.Size(), filepath.Base(local))
	if o.resumable || st.Size() >= resumableFrom {
		return putResumable(cmd, c, o, f, st, sum, dst, bar)
	}
	res, err := c.Upload(ctx, dst.system, dst.path, barReader(f, bar), st.Size(), sum, !o.noClobber)
	if err != nil {
		if client.IsStatus(err, http.StatusUnprocessableEntity) {
			return fmt.Errorf("put %s: the server received different bytes (file changed while uploading?); nothing was written: %w", dst, err)
		}
		return fmt.Errorf("put %s: %w", dst, err)
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if sum != "" && res.SHA256 != sum {
		return errors.New("put: server reports a different SHA-256")
	}
	return nil
}
