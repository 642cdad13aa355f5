package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Transfer scenarios between an SSH host and an S3 bucket.
const (
	TransferSFTPToS3 = "sftp-to-s3"
	TransferS3ToSFTP = "s3-to-sftp"
	// TransferS3ToS3 copies the object to another key of the same bucket: sshapi and rclone
	// both copy on the server (CopyObject); sshapi also verifies the copy's SHA-256.
	TransferS3ToS3 = "s3-to-s3"
)

// PeerRclone is rclone copying between an sftp remote and an s3 remote.
const PeerRclone = "rclone"

// S3Endpoint is an S3 bucket registered with sshapi as a system, and how rclone reaches it.
type S3Endpoint struct {
	// System is the bucket's sshapi system id.
	System string
	// Endpoint is the S3 server's base URL as seen from this host (possibly a wanem proxy).
	Endpoint string
	// Bucket, Region and the credential.
	Bucket, Region               string
	AccessKeyID, SecretAccessKey string
	// Remove deletes an object by key (nil: objects are overwritten).
	Remove func(ctx context.Context, key string) error
}

// RunS3 measures transfers of the bench file from the SSH system Src to the bucket, within the
// bucket and back through sshapi (POST /v1/transfers, verified as b.Verify says), and with Peers
// `rclone copyto` between an sftp remote and an s3 remote (and within the s3 remote) on the
// same servers beside each. The file must already
// be on Src (RunUpDown puts it there). A failed run is recorded with its error; RunS3 returns
// only ctx's error.
func (b *TransferBench) RunS3(ctx context.Context, s3 S3Endpoint) error {
	if b.Verify == "" {
		b.Verify = "sha256"
	}
	src := b.remote("bench-src.bin")
	back := b.remote("bench-from-s3.bin")
	key := "bench/" + filepath.Base(strings.TrimRight(b.RemoteDir, "/")) + "/bench.bin"
	clear := func(k string) {
		if s3.Remove != nil {
			_ = s3.Remove(ctx, k)
		}
	}
	clear(key)
	b.measure(TransferSFTPToS3, BaselineTarget, 0, b.Size, func() (int, error) {
		return b.transferBetween(ctx, b.Src.System, src, s3.System, "/"+key, 0)
	})
	if b.Remove != nil {
		_ = b.Remove(back)
	}
	b.measure(TransferS3ToSFTP, BaselineTarget, 0, b.Size, func() (int, error) {
		return b.transferBetween(ctx, s3.System, "/"+key, b.Src.System, back, 0)
	})
	clear(key + ".copy")
	b.measure(TransferS3ToS3, BaselineTarget, 0, b.Size, func() (int, error) {
		return b.transferBetween(ctx, s3.System, "/"+key, s3.System, "/"+key+".copy", 0)
	})
	clear(key + ".copy")
	if ctx.Err() != nil || !b.Peers {
		return ctx.Err()
	}
	rkey := key + ".rclone"
	clear(rkey)
	b.measure(TransferSFTPToS3, PeerRclone, 1, b.Size, func() (int, error) {
		return 1, b.rclone(ctx, s3, "src:"+src, "dst:"+s3.Bucket+"/"+rkey)
	})
	if b.Remove != nil {
		_ = b.Remove(back)
	}
	b.measure(TransferS3ToSFTP, PeerRclone, 1, b.Size, func() (int, error) {
		return 1, b.rclone(ctx, s3, "dst:"+s3.Bucket+"/"+rkey, "src:"+back)
	})
	clear(rkey + ".copy")
	b.measure(TransferS3ToS3, PeerRclone, 1, b.Size, func() (int, error) {
		return 1, b.rclone(ctx, s3, "dst:"+s3.Bucket+"/"+rkey, "dst:"+s3.Bucket+"/"+rkey+".copy")
	})
	clear(rkey + ".copy")
	clear(key)
	clear(rkey)
	if b.Remove != nil {
		_ = b.Remove(back)
	}
	return ctx.Err()
}

// rclone runs `rclone copyto from to` with two remotes configured through the environment: src,
// the SSH system Src over sftp (its key, known_hosts, and the same cipher when one is set), and
// dst, the bucket (provider Other, path-style). rclone's defaults otherwise: 4 parts of 5 MiB in
// flight for multipart uploads, 64 outstanding sftp requests, size and MD5 checks.
func (b *TransferBench) rclone(ctx context.Context, s3 S3Endpoint, from, to string) error {
	conf, err := os.CreateTemp("", "sshapi-bench-rclone-*.conf")
	if err != nil {
		return fmt.Errorf("rclone config: %w", err)
	}
	_ = conf.Close()
	defer os.Remove(conf.Name())
	ep := b.Src.SSH
	// The environment may carry an AWS_CA_BUNDLE or AWS profile meant for other tools: rclone's
	// AWS SDK would load it and fail on the plain-HTTP endpoint, so AWS_* is not passed on.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "RCLONE_") {
			env = append(env, kv)
		}
	}
	// No known_hosts: rclone 1.60 does not limit the host key algorithms it offers to the key
	// type recorded there, so against an sshd with several host keys it negotiates another type
	// and refuses the match. The bench's sshd is on this machine.
	env = append(env,
		"RCLONE_CONFIG="+conf.Name(),
		"RCLONE_CONFIG_SRC_TYPE=sftp",
		"RCLONE_CONFIG_SRC_HOST="+ep.Host,
		"RCLONE_CONFIG_SRC_PORT="+strconv.Itoa(ep.Port),
		"RCLONE_CONFIG_SRC_USER="+ep.User,
		"RCLONE_CONFIG_SRC_KEY_FILE="+ep.KeyFile,
		"RCLONE_CONFIG_SRC_DISABLE_HASHCHECK=true", // no md5sum/sha1sum commands on the server
		"RCLONE_CONFIG_DST_TYPE=s3",
		"RCLONE_CONFIG_DST_PROVIDER=Other",
		"RCLONE_CONFIG_DST_ENDPOINT="+s3.Endpoint,
		"RCLONE_CONFIG_DST_REGION="+cmpOr(s3.Region, "us-east-1"),
		"RCLONE_CONFIG_DST_ACCESS_KEY_ID="+s3.AccessKeyID,
		"RCLONE_CONFIG_DST_SECRET_ACCESS_KEY="+s3.SecretAccessKey,
		"RCLONE_CONFIG_DST_FORCE_PATH_STYLE=true",
		"RCLONE_CONFIG_DST_NO_CHECK_BUCKET=true",
	)
	if b.Cipher != "" {
		env = append(env, "RCLONE_CONFIG_SRC_CIPHERS="+b.Cipher)
	}
	cmd := exec.CommandContext(ctx, "rclone", "copyto", "--retries", "1", "--low-level-retries", "1", from, to)
	cmd.Env = env
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rclone copyto: %w: %s", err, truncate(strings.TrimSpace(string(msg)), 300))
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
