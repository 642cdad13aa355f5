package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/sshapi/sshapi/internal/storage"
)

var _ storage.CrossCopier = (*Backend)(nil)

// serverID is the digest that names cfg's server and credential (see Backend.server). The keys
// go into it only hashed, so the backend keeps no second copy of the secret.
func serverID(cfg Config, region string) string {
	h := sha256.New()
	for _, f := range []string{cfg.Endpoint, region, strconv.FormatBool(cfg.PathStyle), cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken} {
		h.Write([]byte(strconv.Itoa(len(f)) + ":" + f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CopyFrom implements storage.CrossCopier between buckets (or prefixes) of one server reached
// with one credential: CopyObject up to 5 GiB, asking the server for the copy's SHA-256
// (x-amz-checksum-algorithm), which it computes from the bytes it writes; part by part
// (UploadPartCopy) above. With etag, the copy is conditional on the source's version
// (x-amz-copy-source-if-match, each part likewise): a changed source is storage.ErrChanged.
func (b *Backend) CopyFrom(ctx context.Context, src storage.Backend, from, to, etag string) (*storage.Entry, bool, error) {
	if !b.CanCopyFrom(src) {
		return nil, false, nil
	}
	s := src.(*Backend)
	from, to = path.Clean("/"+from), path.Clean("/"+to)
	se, err := s.Stat(ctx, from)
	if err != nil {
		return nil, true, err
	}
	if se.Type != storage.TypeFile {
		return nil, true, &storage.UnsupportedError{Kind: "s3", Capability: storage.Directories, Op: "copy of a directory"}
	}
	if etag != "" && se.ETag != etag {
		return nil, true, fmt.Errorf("copy %s: %w", from, storage.ErrChanged)
	}
	source := url.PathEscape(s.bucket) + "/" + escapeKey(s.key(from))
	var cond *string
	if etag != "" {
		cond = aws.String(etag)
	}
	if err := b.copyObject(ctx, source, se.Size, to, cond, true); err != nil {
		if isPrecondition(err) {
			return nil, true, fmt.Errorf("copy %s: %w", from, storage.ErrChanged)
		}
		return nil, true, b.classify("copy", from, err)
	}
	e, err := b.Stat(ctx, to)
	return e, true, err
}

// CanCopyFrom implements storage.CrossCopier: src is a bucket of the same server reached with
// the same credential.
func (b *Backend) CanCopyFrom(src storage.Backend) bool {
	s, ok := src.(*Backend)
	return ok && s.server == b.server
}

// copyObject copies source (bucket/key, escaped) of size bytes to p, on the server: with
// CopyObject when it may replace what is at p and the object is at most 5 GiB, else as a
// multipart upload of UploadPartCopy parts (an empty object is stored anew, like a small
// upload). Without overwrite the completion carries
// If-None-Match, so an object someone put at p after the caller checked it was free is never
// replaced (fs.ErrExist): S3-compatible servers do not all honor If-None-Match on CopyObject,
// while Create's uploads already rely on it at completion.
func (b *Backend) copyObject(ctx context.Context, source string, size int64, p string, ifMatch *string, overwrite bool) error {
	key := b.key(p)
	if size <= maxCopyObject && overwrite {
		_, err := b.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b.bucket, Key: &key, CopySource: &source,
			CopySourceIfMatch: ifMatch, ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
		return err
	}
	u := &upload{b: b, p: p, key: key, opts: storage.UploadOptions{Size: size, Overwrite: overwrite}, parts: map[int]part{}, copied: true}
	if size == 0 { // no part to copy: the version the caller saw is empty, and so is its copy
		_, err := u.commitWhole(ctx, []byte{})
		return err
	}
	id, err := u.start(ctx)
	if err != nil {
		return err
	}
	for n, off := 1, int64(0); off < size; n, off = n+1, off+copyPart {
		end := min(off+copyPart, size) - 1
		out, err := b.c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &b.bucket, Key: &u.key, UploadId: &id,
			PartNumber: aws.Int32(int32(n)), CopySource: &source, CopySourceIfMatch: ifMatch,
			CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", off, end))})
		if err != nil {
			_ = u.Abort(context.WithoutCancel(ctx))
			return err
		}
		u.mu.Lock()
		u.parts[n] = part{cp: types.CompletedPart{PartNumber: aws.Int32(int32(n)), ETag: out.CopyPartResult.ETag},
			sp: storage.Part{Number: n, Offset: off, Size: end - off + 1, ETag: aws.ToString(out.CopyPartResult.ETag)}}
		u.mu.Unlock()
	}
	_, err = u.Commit(ctx)
	return err
}

// isPrecondition reports an S3 "PreconditionFailed" answer (412).
func isPrecondition(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed"
}
