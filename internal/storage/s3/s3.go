// Package s3 is the storage backend for an S3 bucket (AWS or any S3-compatible server: Ceph RGW,
// MinIO, versitygw), with aws-sdk-go-v2's service/s3 client.
//
// The bucket, under an optional key prefix, is the backend's root: path "/a/b" is key
// "<prefix>a/b". S3 has no directories: a directory is the common prefix of the keys below it,
// and Mkdir stores an empty marker object "<dir>/" so that an empty directory can exist (listings
// hide it). There is no rename: Rename copies on the server and then deletes, so for a moment
// both names exist, and a failure between the two leaves both (the capabilities say so: no
// AtomicRename). There are no modes and no links.
//
// Uploads are multipart uploads; a part carries its SHA-256 (x-amz-checksum-sha256) so the
// server refuses a part whose bytes changed on the way (400 BadDigest), and the object appears
// only when the upload is completed. Abort, or a failed Commit, aborts the multipart upload, so
// no parts are left behind. A process killed mid-upload cannot abort: a context carrying an
// UploadRecorder (WithUploadRecorder) has each multipart upload recorded, durably, before its
// first part is sent, so that whoever keeps the records aborts it later. A part is held in memory while it is sent (SigV4 over plain HTTP
// needs a seekable body): memory is the part size times the parts in flight, which the caller
// bounds.
//
// Request checksums are computed only when an operation requires them
// (RequestChecksumCalculation "when required"): the SDK's 2025 default of adding CRC32 trailers
// to every request breaks many S3-compatible servers.
//
// # Concurrency
//
// Operations that take several requests are open to whatever others do to the bucket between
// them (the owner, and anything outside sshapi, are ordered by nothing), so each later request
// names the state the earlier ones saw instead of trusting it: Copy and Rename copy only the
// source version Stat returned (x-amz-copy-source-if-match on its ETag) and Rename deletes the
// source only while it is still that version (If-Match), so a version written meanwhile is
// never deleted without having been copied (storage.ErrChanged instead). A Copy or Rename that
// may not overwrite completes its copy with If-None-Match (the copy is then a multipart upload
// of copied parts: not every server honors If-None-Match on CopyObject), so what someone put
// at the destination after it was checked free is not replaced (fs.ErrExist). A
// non-recursive Remove of a directory deletes its marker and nothing else, so a key put below
// it after the check that it is empty survives.
package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/sshapi/sshapi/internal/storage"
)

// Limits of S3 multipart uploads and copies.
const (
	minPart       = 5 << 20
	maxPart       = 5 << 30
	maxParts      = 10_000
	maxCopyObject = 5 << 30 // larger objects are copied part by part
	copyPart      = 512 << 20
	deleteBatch   = 1000
)

// Config says how to reach a bucket.
type Config struct {
	// Endpoint is the server's base URL (https://s3.example.org:9000); empty means AWS.
	Endpoint string
	// Region is the bucket's region ("us-east-1" when empty).
	Region string
	// Bucket is the bucket; Prefix, if set, a key prefix inside it that acts as the root.
	Bucket, Prefix string
	// PathStyle addresses the bucket as https://endpoint/bucket rather than a host name.
	PathStyle bool
	// AccessKeyID, SecretAccessKey and SessionToken are the credential.
	AccessKeyID, SecretAccessKey, SessionToken string
	// HTTPClient carries TLS settings (a custom CA) and the dial policy; nil uses a default one.
	HTTPClient *http.Client
}

// Backend is a storage.Backend on one bucket. It is safe for concurrent use.
type Backend struct {
	c      *s3.Client
	bucket string
	prefix string // "" or ending in "/"
	// server names the server and the credential (a digest of the endpoint, region,
	// addressing and keys): two backends with the same one can copy between their buckets on
	// the server (CopyFrom).
	server string
}

var _ storage.Backend = (*Backend)(nil)

// New returns the backend for cfg. It makes no request.
func New(cfg Config) (*Backend, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: bucket is required")
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		if strings.Contains(prefix, "//") || strings.ContainsRune(prefix, 0) || slices.Contains(strings.Split(prefix, "/"), "..") {
			return nil, fmt.Errorf("s3: invalid prefix %q", cfg.Prefix)
		}
		prefix += "/"
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	opts := s3.Options{
		Region:                     region,
		UsePathStyle:               cfg.PathStyle,
		Credentials:                credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	if cfg.HTTPClient != nil {
		opts.HTTPClient = cfg.HTTPClient
	}
	return &Backend{c: s3.New(opts), bucket: cfg.Bucket, prefix: prefix, server: serverID(cfg, region)}, nil
}

// Client is the underlying S3 client, for tests and tools.
func (b *Backend) Client() *s3.Client { return b.c }

// Capabilities implements storage.Backend.
func (b *Backend) Capabilities() storage.Capabilities {
	return storage.Capabilities{Kind: "s3", Has: []storage.Capability{storage.ServerCopy},
		MinPartSize: minPart, MaxPartSize: maxPart, MaxParts: maxParts}
}

// key is the object key of path p ("/" is the prefix itself).
func (b *Backend) key(p string) string { return b.prefix + strings.TrimPrefix(path.Clean("/"+p), "/") }

// dirPrefix is the key prefix of the entries of directory p.
func (b *Backend) dirPrefix(p string) string {
	if k := b.key(p); k != b.prefix {
		return k + "/"
	}
	return b.prefix
}

// classify maps S3 errors to the storage errors.
func (b *Backend) classify(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NotFound", "NoSuchKey", "NoSuchUpload":
			return fmt.Errorf("%s %s: %w", op, p, fs.ErrNotExist)
		case "NoSuchBucket":
			return fmt.Errorf("%s %s: bucket %q does not exist: %w", op, p, b.bucket, fs.ErrNotExist)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden":
			return fmt.Errorf("%s %s: the server refused the credential (%s): %w", op, p, ae.ErrorCode(), fs.ErrPermission)
		case "PreconditionFailed":
			return fmt.Errorf("%s %s: %w", op, p, fs.ErrExist)
		}
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// Stat implements storage.Backend. A key is a file; a prefix with keys below it (or a marker)
// is a directory.
func (b *Backend) Stat(ctx context.Context, p string) (*storage.Entry, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return &storage.Entry{Path: "/", Name: "/", Type: storage.TypeDir}, nil
	}
	out, err := b.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: aws.String(b.key(p)), ChecksumMode: types.ChecksumModeEnabled})
	if err == nil {
		return &storage.Entry{Path: p, Name: path.Base(p), Type: storage.TypeFile, Size: aws.ToInt64(out.ContentLength),
			ModTime: aws.ToTime(out.LastModified), ETag: aws.ToString(out.ETag), Checksum: aws.ToString(out.ChecksumSHA256)}, nil
	}
	if err = b.classify("stat", p, err); !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "bucket") {
		return nil, err
	}
	isDir, err := b.hasKeys(ctx, b.dirPrefix(p))
	if err != nil {
		return nil, b.classify("stat", p, err)
	}
	if !isDir {
		return nil, fmt.Errorf("stat %s: %w", p, fs.ErrNotExist)
	}
	return &storage.Entry{Path: p, Name: path.Base(p), Type: storage.TypeDir}, nil
}

// hasKeys reports whether any key starts with prefix.
func (b *Backend) hasKeys(ctx context.Context, prefix string) (bool, error) {
	out, err := b.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: &prefix, MaxKeys: aws.Int32(1)})
	if err != nil {
		return false, err
	}
	return len(out.Contents) > 0, nil
}

// List implements storage.Backend: one ListObjectsV2 page with "/" as the delimiter, common
// prefixes as directories, the directory's own marker hidden. The cursor is S3's continuation
// token.
func (b *Backend) List(ctx context.Context, dir, cursor string, limit int) (*storage.Page, error) {
	dir = path.Clean("/" + dir)
	prefix := b.dirPrefix(dir)
	in := &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: &prefix, Delimiter: aws.String("/")}
	if limit > 0 {
		in.MaxKeys = aws.Int32(int32(min(limit, 1000)))
	}
	if cursor != "" {
		in.ContinuationToken = &cursor
	}
	out, err := b.c.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, b.classify("list", dir, err)
	}
	page := &storage.Page{}
	for _, cp := range out.CommonPrefixes {
		name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), prefix), "/")
		if !listable(name) {
			continue
		}
		page.Entries = append(page.Entries, storage.Entry{Path: path.Join(dir, name), Name: name, Type: storage.TypeDir})
	}
	for _, o := range out.Contents {
		name := strings.TrimPrefix(aws.ToString(o.Key), prefix)
		if !listable(name) { // "": the directory's marker
			continue
		}
		page.Entries = append(page.Entries, storage.Entry{Path: path.Join(dir, name), Name: name, Type: storage.TypeFile,
			Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified), ETag: aws.ToString(o.ETag)})
	}
	sort.Slice(page.Entries, func(i, j int) bool { return page.Entries[i].Name < page.Entries[j].Name })
	if aws.ToBool(out.IsTruncated) {
		page.Next = aws.ToString(out.NextContinuationToken)
	}
	if cursor == "" && len(page.Entries) == 0 && len(out.Contents) == 0 && dir != "/" {
		// Nothing below: a missing directory, or a file.
		e, err := b.Stat(ctx, dir)
		if err != nil {
			return nil, err
		}
		if e.Type != storage.TypeDir {
			return nil, fmt.Errorf("list %s: %w", dir, storage.ErrNotDir)
		}
	}
	return page, nil
}

// listable reports whether name, what a key holds below a listed directory's prefix, names an
// entry of that directory. Not "" (the directory's marker), and not a name no path can reach:
// ".", ".." or one with a "/" (a server that ignored the delimiter). AWS S3 stores a key such as
// "d/../x" literally (another tool may have written it), and the entry's path, d joined with
// "..", would be d's parent: a walk (a transfer, an archive, a recursive delete) would climb out
// of the directory, the grant or the system's prefix it was confined to.
func listable(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
}

// Open implements storage.Backend with a ranged GET, conditional (If-Match) with etag.
func (b *Backend) Open(ctx context.Context, p string, off, n int64, etag string) (io.ReadCloser, error) {
	p = path.Clean("/" + p)
	in := &s3.GetObjectInput{Bucket: &b.bucket, Key: aws.String(b.key(p))}
	if etag != "" {
		in.IfMatch = aws.String(etag) // the server answers another version with 412
	}
	// sameVersion answers a read that needs no GET: p must exist and, with etag, be that version.
	sameVersion := func() (io.ReadCloser, error) {
		e, err := b.Stat(ctx, p)
		if err != nil {
			return nil, err
		}
		if etag != "" && e.ETag != etag {
			return nil, fmt.Errorf("read %s: %w", p, storage.ErrChanged)
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	switch {
	case n == 0:
		return sameVersion()
	case n > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	out, err := b.c.GetObject(ctx, in)
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange" {
			return sameVersion() // at or past the end
		}
		if etag != "" && errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed" {
			return nil, fmt.Errorf("read %s: %w", p, storage.ErrChanged)
		}
		return nil, b.classify("read", p, err)
	}
	return out.Body, nil
}

// Create implements storage.Backend. Without overwrite an existing object is refused now and,
// where the server supports conditional writes, again at Commit (If-None-Match).
func (b *Backend) Create(ctx context.Context, p string, opts storage.UploadOptions) (storage.Upload, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return nil, fmt.Errorf("create /: %w", storage.ErrIsDir)
	}
	if e, err := b.Stat(ctx, p); err == nil {
		if e.Type == storage.TypeDir {
			return nil, fmt.Errorf("create %s: %w", p, storage.ErrIsDir)
		}
		if !opts.Overwrite {
			return nil, fmt.Errorf("create %s: %w", p, fs.ErrExist)
		}
	} else if !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "bucket") {
		return nil, err
	}
	return &upload{b: b, p: p, key: b.key(p), opts: opts, parts: map[int]part{}}, nil
}

// upload is a multipart upload, started at the first part (or at ID).
type upload struct {
	b    *Backend
	p    string
	key  string
	opts storage.UploadOptions

	mu    sync.Mutex
	id    string // the multipart upload id; "" until the first part
	parts map[int]part
	done  bool
	// whole holds the object of an upload whose first part is all of it (its Size) and that
	// has no multipart upload id: Commit stores it with one PutObject.
	whole []byte
	// rec recorded the multipart upload (see WithUploadRecorder); told when it ends.
	rec UploadRecorder
	// copied: the parts are copied on the server (copyObject), so the multipart upload is
	// started without a checksum algorithm and its parts carry none (servers differ in what
	// they report for a copied part: versitygw gives the source's composite checksum).
	copied bool
}

// part is a finished part: what CompleteMultipartUpload needs and what Parts reports.
type part struct {
	cp types.CompletedPart
	sp storage.Part
}

// start creates the multipart upload once.
func (u *upload) start(ctx context.Context) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return "", fmt.Errorf("upload %s: already committed or aborted", u.p)
	}
	if u.id != "" {
		return u.id, nil
	}
	in := &s3.CreateMultipartUploadInput{Bucket: &u.b.bucket, Key: &u.key, ChecksumAlgorithm: types.ChecksumAlgorithmSha256}
	if u.copied {
		in.ChecksumAlgorithm = ""
	}
	out, err := u.b.c.CreateMultipartUpload(ctx, in)
	if err != nil {
		return "", u.b.classify("upload", u.p, err)
	}
	id := aws.ToString(out.UploadId)
	if rec := recorderOf(ctx); rec != nil {
		if err := rec.Started(ctx, u.b.bucket, u.key, u.p, id); err != nil {
			_, _ = u.b.c.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: &u.b.bucket, Key: &u.key, UploadId: &id})
			return "", fmt.Errorf("upload %s: record the multipart upload: %w", u.p, err)
		}
		u.rec = rec
	}
	u.id = id
	return u.id, nil
}

// ended tells the recorder, if any, that the multipart upload is gone.
func (u *upload) ended() {
	u.mu.Lock()
	rec, id := u.rec, u.id
	u.rec = nil
	u.mu.Unlock()
	if rec != nil {
		rec.Ended(id)
	}
}

// ID implements storage.Upload: the multipart upload id, created now if needed (a small
// upload held whole becomes a multipart upload of that one part, so that it can be resumed).
func (u *upload) ID(ctx context.Context) (string, error) {
	id, err := u.start(ctx)
	if err != nil {
		return "", err
	}
	u.mu.Lock()
	whole := u.whole
	u.whole = nil
	u.mu.Unlock()
	if whole != nil {
		if err := u.WritePart(ctx, 1, 0, bytes.NewReader(whole), int64(len(whole)), nil); err != nil {
			return "", err
		}
	}
	return id, nil
}

// Parts implements storage.Upload.
func (u *upload) Parts() []storage.Part {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]storage.Part, 0, len(u.parts))
	for _, p := range u.parts {
		out = append(out, p.sp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// WritePart implements storage.Upload: the part is sent with its SHA-256, which the server
// checks. A body that is an io.ReadSeeker (a *bytes.Reader of the caller's buffer) is sent as
// it is; any other is read into memory first (SigV4 over plain HTTP needs a seekable body).
func (u *upload) WritePart(ctx context.Context, n int, off int64, r io.Reader, size int64, sum []byte) error {
	if n < 1 || n > maxParts {
		return fmt.Errorf("upload %s: part number %d out of 1..%d", u.p, n, maxParts)
	}
	if size > maxPart {
		return fmt.Errorf("upload %s: part %d of %d bytes exceeds %d", u.p, n, size, int64(maxPart))
	}
	if n == 1 && off == 0 && size == u.opts.Size && size <= minPart {
		u.mu.Lock()
		single := u.id == ""
		u.mu.Unlock()
		if single {
			return u.holdWhole(r, size, sum)
		}
	}
	id, err := u.start(ctx)
	if err != nil {
		return err
	}
	body, ok := r.(io.ReadSeeker)
	if !ok || sum == nil {
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("upload %s: part %d: %w", u.p, n, err)
		}
		if sum == nil {
			s := sha256.Sum256(buf)
			sum = s[:]
		}
		body = bytes.NewReader(buf)
	}
	enc := base64.StdEncoding.EncodeToString(sum)
	out, err := u.b.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &u.b.bucket, Key: &u.key, UploadId: &id,
		PartNumber: aws.Int32(int32(n)), Body: body, ContentLength: aws.Int64(size),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256, ChecksumSHA256: &enc},
		// The signed x-amz-checksum-sha256 header already binds the body: hashing it again for
		// the signature would cost a second pass, and the server would then refuse a
		// corrupted part for the signature (XAmzContentSHA256Mismatch) instead of its checksum.
		s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
	if err != nil {
		return u.b.classify(fmt.Sprintf("upload part %d of", n), u.p, err)
	}
	u.mu.Lock()
	u.parts[n] = part{
		cp: types.CompletedPart{PartNumber: aws.Int32(int32(n)), ETag: out.ETag, ChecksumSHA256: out.ChecksumSHA256},
		sp: storage.Part{Number: n, Offset: off, Size: size, ETag: aws.ToString(out.ETag), SHA256: slices.Clone(sum)},
	}
	u.mu.Unlock()
	return nil
}

// holdWhole keeps the one part of a small upload (the whole object, up to the minimum part
// size) for Commit's single PutObject, checked against sum now as the server would: nothing is
// sent, so nothing is left on the server if the upload is dropped.
func (u *upload) holdWhole(r io.Reader, size int64, sum []byte) error {
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return fmt.Errorf("upload %s: part 1: %w", u.p, err)
	}
	s := sha256.Sum256(buf)
	if sum != nil && !bytes.Equal(s[:], sum) {
		return fmt.Errorf("upload %s: part 1 does not match its sha256 (BadDigest)", u.p)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return fmt.Errorf("upload %s: already committed or aborted", u.p)
	}
	u.whole = buf
	u.parts[1] = part{sp: storage.Part{Number: 1, Size: size, SHA256: s[:]}}
	return nil
}

// commitWhole stores a small upload with one PutObject carrying its SHA-256 (which the server
// checks and keeps as the object's FULL_OBJECT checksum).
func (u *upload) commitWhole(ctx context.Context, body []byte) (*storage.Entry, error) {
	s := sha256.Sum256(body)
	enc := base64.StdEncoding.EncodeToString(s[:])
	in := &s3.PutObjectInput{Bucket: &u.b.bucket, Key: &u.key, Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256, ChecksumSHA256: &enc}
	if !u.opts.Overwrite {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := u.b.c.PutObject(ctx, in, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
	u.mu.Lock()
	u.done, u.whole = true, nil
	u.mu.Unlock()
	if err != nil {
		return nil, u.b.classify("commit", u.p, err)
	}
	e, err := u.b.Stat(ctx, u.p)
	if err != nil {
		return nil, err
	}
	if c := aws.ToString(out.ChecksumSHA256); c != "" {
		e.Checksum = c
	}
	return e, nil
}

// Commit implements storage.Upload. A failed Commit aborts the upload. The entry's Checksum is
// the composite SHA-256 the server computed from the parts' sums, or the object's own SHA-256
// for a small upload stored whole.
func (u *upload) Commit(ctx context.Context) (*storage.Entry, error) {
	u.mu.Lock()
	whole, id0, done := u.whole, u.id, u.done
	u.mu.Unlock()
	if !done && id0 == "" && (whole != nil || (len(u.Parts()) == 0 && u.opts.Size <= 0)) {
		if whole == nil {
			whole = []byte{}
		}
		return u.commitWhole(ctx, whole) // a small object, or an empty one, in one request
	}
	id, err := u.start(ctx) // an empty file is one empty part
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	if len(u.parts) == 0 {
		u.mu.Unlock()
		if err := u.WritePart(ctx, 1, 0, strings.NewReader(""), 0, nil); err != nil {
			_ = u.Abort(context.WithoutCancel(ctx))
			return nil, err
		}
		u.mu.Lock()
	}
	parts := make([]types.CompletedPart, 0, len(u.parts))
	for i := 1; i <= len(u.parts); i++ {
		cp, ok := u.parts[i]
		if !ok {
			u.mu.Unlock()
			_ = u.Abort(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("upload %s: part %d is missing (%d parts written)", u.p, i, len(u.parts))
		}
		parts = append(parts, cp.cp)
	}
	u.mu.Unlock()
	in := &s3.CompleteMultipartUploadInput{Bucket: &u.b.bucket, Key: &u.key, UploadId: &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
	if !u.opts.Overwrite {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := u.b.c.CompleteMultipartUpload(ctx, in)
	if err != nil {
		_ = u.Abort(context.WithoutCancel(ctx))
		return nil, u.b.classify("commit", u.p, err)
	}
	u.mu.Lock()
	u.done = true
	u.mu.Unlock()
	u.ended()
	e, err := u.b.Stat(ctx, u.p)
	if err != nil {
		return nil, err
	}
	if c := aws.ToString(out.ChecksumSHA256); c != "" {
		e.Checksum = c
	}
	return e, nil
}

// Abort implements storage.Upload.
func (u *upload) Abort(ctx context.Context) error {
	u.mu.Lock()
	id, done := u.id, u.done
	u.done, u.whole = true, nil
	u.mu.Unlock()
	if id == "" || done {
		return nil
	}
	_, err := u.b.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &u.b.bucket, Key: &u.key, UploadId: &id})
	if err = u.b.classify("abort", u.p, err); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err == nil {
		u.ended() // otherwise its record lapses and the sweep aborts it
	}
	return err
}

// Resume implements storage.Backend: the parts the server lists (ListParts, page by page) that
// match a known part's number, size and SHA-256 are kept; the others will be written again.
func (b *Backend) Resume(ctx context.Context, p, id string, known []storage.Part, opts storage.UploadOptions) (storage.Upload, error) {
	p = path.Clean("/" + p)
	if id == "" {
		return nil, fmt.Errorf("resume %s: no upload id: %w", p, fs.ErrNotExist)
	}
	u := &upload{b: b, p: p, key: b.key(p), opts: opts, id: id, parts: map[int]part{}}
	want := make(map[int]storage.Part, len(known))
	for _, k := range known {
		want[k.Number] = k
	}
	pages := s3.NewListPartsPaginator(b.c, &s3.ListPartsInput{Bucket: &b.bucket, Key: &u.key, UploadId: &id})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, b.classify("resume", p, err)
		}
		for _, lp := range out.Parts {
			n := int(aws.ToInt32(lp.PartNumber))
			k, ok := want[n]
			if !ok || k.Size != aws.ToInt64(lp.Size) || base64.StdEncoding.EncodeToString(k.SHA256) != aws.ToString(lp.ChecksumSHA256) {
				continue
			}
			k.ETag = aws.ToString(lp.ETag)
			u.parts[n] = part{cp: types.CompletedPart{PartNumber: lp.PartNumber, ETag: lp.ETag, ChecksumSHA256: lp.ChecksumSHA256}, sp: k}
		}
	}
	return u, nil
}

// Remove implements storage.Backend: a file is one DeleteObject; an empty directory its
// marker's; with recursive, a directory's keys are deleted in batches of 1000, page by page,
// never all listed at once.
func (b *Backend) Remove(ctx context.Context, p string, recursive bool) error {
	p = path.Clean("/" + p)
	e, err := b.Stat(ctx, p)
	if err != nil {
		return err
	}
	if e.Type == storage.TypeFile {
		_, err := b.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: aws.String(b.key(p))})
		return b.classify("remove", p, err)
	}
	prefix := b.dirPrefix(p)
	if !recursive {
		// An empty directory is its marker alone, and the marker is all that is deleted: a key
		// someone puts below it after this check stays (the directory then goes on existing
		// as its prefix), where a sweep of the prefix would delete it unseen.
		out, err := b.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: &prefix, MaxKeys: aws.Int32(2)})
		if err != nil {
			return b.classify("remove", p, err)
		}
		for _, o := range out.Contents {
			if aws.ToString(o.Key) != prefix {
				return fmt.Errorf("remove %s: %w", p, storage.ErrNotEmpty)
			}
		}
		if prefix == "" { // the bucket's top has no marker
			return nil
		}
		_, err = b.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: &prefix})
		return b.classify("remove", p, err)
	}
	pages := s3.NewListObjectsV2Paginator(b.c, &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: &prefix, MaxKeys: aws.Int32(deleteBatch)})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return b.classify("remove", p, err)
		}
		if len(out.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, 0, len(out.Contents))
		for _, o := range out.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		del, err := b.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &b.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return b.classify("remove", p, err)
		}
		if len(del.Errors) > 0 {
			return fmt.Errorf("remove %s: %d keys not deleted, first %s: %s", p, len(del.Errors), aws.ToString(del.Errors[0].Key), aws.ToString(del.Errors[0].Message))
		}
	}
	return nil
}

// Mkdir implements storage.Backend with an empty marker object "<dir>/". parents is moot (S3
// has no parents to make) except that without it an existing directory is fs.ErrExist.
func (b *Backend) Mkdir(ctx context.Context, p string, parents bool) error {
	p = path.Clean("/" + p)
	if e, err := b.Stat(ctx, p); err == nil {
		if e.Type == storage.TypeDir && parents {
			return nil
		}
		return fmt.Errorf("mkdir %s: %w", p, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "bucket") {
		return err
	}
	for d := path.Dir(p); d != "/"; d = path.Dir(d) { // a file on the way is not a directory
		e, err := b.headFile(ctx, d)
		if err != nil {
			return err
		}
		if e {
			return fmt.Errorf("mkdir %s: %s: %w", p, d, storage.ErrNotDir)
		}
	}
	_, err := b.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b.bucket, Key: aws.String(b.dirPrefix(p)), Body: strings.NewReader(""), ContentLength: aws.Int64(0)})
	return b.classify("mkdir", p, err)
}

// headFile reports whether a file (an object) is at p.
func (b *Backend) headFile(ctx context.Context, p string) (bool, error) {
	_, err := b.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: aws.String(b.key(p))})
	if err == nil {
		return true, nil
	}
	if err = b.classify("stat", p, err); errors.Is(err, fs.ErrNotExist) && !strings.Contains(err.Error(), "bucket") {
		return false, nil
	}
	return false, err
}

// Rename implements storage.Backend for files: a server-side copy, then a delete. Not atomic,
// but it never loses a version: the copy is conditional on the source's ETag as Stat saw it
// (x-amz-copy-source-if-match) and so is the delete (If-Match), so a source that another
// principal overwrites before the copy is not copied, and one overwritten between the copy and
// the delete is not deleted: both are storage.ErrChanged, the second with both names kept (the
// destination holding the version copied, the source the new one).
func (b *Backend) Rename(ctx context.Context, from, to string, overwrite bool) error {
	from = path.Clean("/" + from)
	src, err := b.copyFile(ctx, from, to, overwrite)
	if err != nil {
		return err
	}
	_, err = b.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: aws.String(b.key(from)), IfMatch: versionCond(src)})
	if isPrecondition(err) {
		return fmt.Errorf("rename %s: the source changed after it was copied to %s, both are kept: %w", from, path.Clean("/"+to), storage.ErrChanged)
	}
	return b.classify("rename: delete the source", from, err)
}

// Copy implements storage.Backend for files with CopyObject, part by part (UploadPartCopy) above
// 5 GiB (see copyObject), conditional on the source's ETag as Stat saw it: a source overwritten
// meanwhile is storage.ErrChanged.
func (b *Backend) Copy(ctx context.Context, from, to string, overwrite bool) error {
	_, err := b.copyFile(ctx, from, to, overwrite)
	return err
}

// copyFile is Copy; it returns the source's entry, the version copied.
func (b *Backend) copyFile(ctx context.Context, from, to string, overwrite bool) (*storage.Entry, error) {
	from, to = path.Clean("/"+from), path.Clean("/"+to)
	src, err := b.Stat(ctx, from)
	if err != nil {
		return nil, err
	}
	if src.Type != storage.TypeFile {
		return nil, &storage.UnsupportedError{Kind: "s3", Capability: storage.Directories, Op: "copy or rename of a directory"}
	}
	if dst, err := b.Stat(ctx, to); err == nil {
		if dst.Type == storage.TypeDir {
			return nil, fmt.Errorf("copy %s: %w", to, storage.ErrIsDir)
		}
		if !overwrite {
			return nil, fmt.Errorf("copy %s: %w", to, fs.ErrExist)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	source := url.PathEscape(b.bucket) + "/" + escapeKey(b.key(from))
	if err := b.copyObject(ctx, source, src.Size, to, versionCond(src), overwrite); err != nil {
		if isPrecondition(err) {
			return nil, fmt.Errorf("copy %s: %w", from, storage.ErrChanged)
		}
		return nil, b.classify("copy", from, err)
	}
	return src, nil
}

// versionCond is the condition (If-Match, x-amz-copy-source-if-match) that names e's version,
// or nil (no condition) for an entry without an ETag.
func versionCond(e *storage.Entry) *string {
	if e.ETag == "" {
		return nil
	}
	return aws.String(e.ETag)
}

// escapeKey URL-escapes each segment of a key for x-amz-copy-source.
func escapeKey(k string) string {
	segs := strings.Split(k, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// Bucket is the backend's bucket.
func (b *Backend) Bucket() string { return b.bucket }
