package s3

import "context"

// UploadRecorder is told of the multipart uploads started under a context (WithUploadRecorder),
// so that one whose request cannot finish it — its process is killed — is found and aborted
// later instead of staying on the bucket (api.TempKeeper keeps these records in its ledger).
type UploadRecorder interface {
	// Started records multipart upload id, started for path p (key key) in bucket, and returns
	// once the record is durable: no part is sent before. An error aborts the upload.
	Started(ctx context.Context, bucket, key, p, id string) error
	// Ended says the upload was completed or aborted: its record may go.
	Ended(id string)
}

type recorderKey struct{}

// WithUploadRecorder returns ctx carrying rec: the multipart uploads started with it are
// recorded.
func WithUploadRecorder(ctx context.Context, rec UploadRecorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, rec)
}

func recorderOf(ctx context.Context) UploadRecorder {
	rec, _ := ctx.Value(recorderKey{}).(UploadRecorder)
	return rec
}
