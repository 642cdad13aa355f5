package store

import (
	"context"
	"time"
)

// TempFile is a temporary name a request is writing on a system (an upload's part file, an
// archive being built, an extraction directory), recorded before it exists; or, on an S3
// system, a multipart upload a request is sending (UploadID set), recorded before its parts go. While the request
// runs, its instance keeps renewing LeaseUntil; a record whose lease has lapsed belongs to a
// request that ended without removing its temporary name (its instance was killed, its SSH
// connection was lost) and may be removed by any instance.
type TempFile struct {
	// ID is the record's random id.
	ID string
	// SystemOwner and SystemID name the system; the temporary name is removed with the owner's
	// credential.
	SystemOwner, SystemID string
	// Dir is the absolute directory and Name the temporary name in it. For a multipart upload
	// Dir is empty and Name is the path in the system the upload would become.
	Dir, Name string
	// Bucket and UploadID name an S3 multipart upload (empty for a temporary name): a lapsed
	// one is aborted rather than removed.
	Bucket, UploadID string
	// CreatedAt is set by RecordTemp; LeaseUntil is when the record may be claimed.
	CreatedAt, LeaseUntil time.Time
}

// TempStore keeps the records of temporary names in use, so that a name left behind by a
// request that could not remove it is found and removed later, by any instance.
type TempStore interface {
	// RecordTemp inserts t (ErrConflict if its id exists) and sets t.CreatedAt. It returns
	// only once the record is durable: the caller creates the name afterwards.
	RecordTemp(ctx context.Context, t *TempFile) error
	// RenewTemps extends the leases of the records ids to until (missing ids are ignored).
	RenewTemps(ctx context.Context, ids []string, until time.Time) error
	// ForgetTemps deletes the records ids (missing ids are ignored).
	ForgetTemps(ctx context.Context, ids []string) error
	// ClaimTemps takes up to limit records whose lease lapsed before now, extends their leases
	// to until and returns them. A record is claimed by one caller only, on any number of
	// instances at once.
	ClaimTemps(ctx context.Context, now, until time.Time, limit int) ([]TempFile, error)
}
