package store

import (
	"context"
	"errors"
	"time"
)

// ErrLocked is wrapped by the error of an upload operation refused because another request
// holds the upload's lease (a concurrent PATCH, on this instance or another).
var ErrLocked = errors.New("store: upload locked")

// Upload is a resumable (tus) upload in progress: a hidden part file next to the destination
// on the system and, here, the number of bytes committed to it. The committed offset is the
// truth: the part file may be longer after a failed write, never shorter.
type Upload struct {
	// ID is the upload's random id (its URL).
	ID string
	// Owner is the user who created the upload (the principal, a grantee included); only they
	// can continue it.
	Owner string
	// SystemRef is the system as the creator named it in the URL ("id" or "owner:id").
	SystemRef string
	// SystemOwner and SystemID are the system as the access decision resolved it.
	SystemOwner, SystemID string
	// Path is the destination as the creator gave it; Dest is its absolute form.
	Path, Dest string
	// PartName is the base name of the part file in Dest's directory.
	PartName string
	// Length is the upload's total size in bytes.
	Length int64
	// Offset is the number of bytes committed to the part file.
	Offset int64
	// HashState is the SHA-256 state (encoding.BinaryMarshaler) after Offset bytes.
	HashState []byte
	// SHA256 is the expected hex digest of the whole content, if the client gave one.
	SHA256 string
	// Overwrite and Parents are the creation's options.
	Overwrite, Parents bool
	// CreatedAt is set by CreateUpload; ExpiresAt is when the upload may be swept.
	CreatedAt, ExpiresAt time.Time
}

// CreateUploadParams are the arguments of CreateUpload.
type CreateUploadParams struct {
	// Upload is stored; its CreatedAt is set.
	Upload *Upload
	// MaxOpen bounds the owner's unexpired uploads and MaxBytes the sum of their lengths
	// (0: no bound); beyond either the create fails with ErrLimit.
	MaxOpen  int
	MaxBytes int64
	// Now is the time against which other uploads count as expired.
	Now time.Time
}

// LeaseUploadParams are the arguments of LeaseUpload and CommitUpload.
type LeaseUploadParams struct {
	// Owner and ID name the upload.
	Owner, ID string
	// Token identifies the lease holder.
	Token string
	// Now and Until: the lease is taken if free (no lease, or one expired by Now) and then
	// held until Until.
	Now, Until time.Time
	// Offset and HashState are CommitUpload's new committed state.
	Offset    int64
	HashState []byte
}

// UploadStore keeps resumable uploads and their leases, so that any instance may continue an
// upload and no two requests write one at once.
type UploadStore interface {
	// CreateUpload inserts p.Upload (ErrConflict if the id exists; if the owner
	// is at p.MaxOpen or the lengths would exceed p.MaxBytes: an error wrapping ErrLimit).
	CreateUpload(ctx context.Context, p *CreateUploadParams) error
	// GetUpload returns the owner's upload id, or ErrNotFound.
	GetUpload(ctx context.Context, owner, id string) (*Upload, error)
	// LeaseUpload takes the upload's lease for p.Token until p.Until and returns the upload;
	// ErrNotFound if there is no such upload, ErrLocked if another token holds an unexpired
	// lease.
	LeaseUpload(ctx context.Context, p *LeaseUploadParams) (*Upload, error)
	// CommitUpload records p.Offset and p.HashState and extends the lease to p.Until, if
	// p.Token still holds it (else ErrLocked).
	CommitUpload(ctx context.Context, p *LeaseUploadParams) error
	// RenewUpload extends p.Token's lease to p.Until, if p.Token still holds it (else ErrLocked,
	// also once the upload is gone), leaving the committed state as it is.
	RenewUpload(ctx context.Context, p *LeaseUploadParams) error
	// ReleaseUpload gives up token's lease (no error if it is not held).
	ReleaseUpload(ctx context.Context, owner, id, token string) error
	// DeleteUpload removes the upload; no error if it does not exist.
	DeleteUpload(ctx context.Context, owner, id string) error
	// ExpiredUploads returns up to limit uploads that expired before now and are not leased:
	// those never leased or released first (a lapsed lease is one a sweep held while it put
	// the upload off), then by expiry.
	ExpiredUploads(ctx context.Context, now time.Time, limit int) ([]Upload, error)
}
