package sftp

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/storage"
)

// stripedUpload is what a striped upload tells about itself.
type stripedUpload interface {
	Channels() int
	RemoteTempFile() string
}

// TestStripedUpload: the parts of one upload go over every channel of a striped backend (parts
// sent concurrently and out of order, one through a reader that is not a bytes.Reader), the
// file is exactly the parts; a part whose bytes do not match its SHA-256 is refused over another
// channel too and, sent again right, counts; a resumed upload goes on over the channels.
func TestStripedUpload(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	pool, target := testPool(t, srv)
	fss := channels(t, pool, target, srv, 3)
	dir := srv.MkTemp(t)
	b := NewStriped(dir, fss...)
	const part = 1 << 20
	content := make([]byte, 5*part+777)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range content {
		content[i] = byte(rng.Uint32())
	}
	piece := func(n int) []byte { return content[(n-1)*part : min(n*part, len(content))] }
	sum := func(n int) []byte { s := sha256.Sum256(piece(n)); return s[:] }
	ctx := t.Context()
	up, err := b.Create(ctx, "/big.bin", storage.UploadOptions{Size: int64(len(content))})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(piece(2))
	bad[100] ^= 1
	if err := up.WritePart(ctx, 2, part, bytes.NewReader(bad), part, sum(2)); !errors.Is(err, files.ErrPartDigest) {
		t.Fatalf("a corrupt part over the second channel: %v, want files.ErrPartDigest", err)
	}
	errs := make(chan error, 6)
	for _, n := range []int{5, 3, 1, 2} {
		go func() {
			errs <- up.WritePart(ctx, n, int64(n-1)*part, bytes.NewReader(piece(n)), int64(len(piece(n))), sum(n))
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := up.(stripedUpload).Channels(); got != 3 {
		t.Fatalf("parts went over %d channels, want 3", got)
	}
	tmp := up.(stripedUpload).RemoteTempFile()
	if fi, err := os.Stat(tmp); err != nil || fi.Size() < 5*part {
		t.Fatalf("temporary file %s: %v", tmp, err)
	}
	// The process dies here (its handles are simply dropped); a new one resumes the upload from
	// its record: parts 4 (channel 0, through a reader that hands out a few bytes at a time) and
	// 6 (channel 2) are left.
	id, err := up.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	re, err := b.Resume(ctx, "/big.bin", id, up.Parts(), storage.UploadOptions{Size: int64(len(content))})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(re.Parts()); got != 4 {
		t.Fatalf("%d parts confirmed on resume, want 4", got)
	}
	if err := re.WritePart(ctx, 4, 3*part, iotest.HalfReader(bytes.NewReader(piece(4))), part, sum(4)); err != nil {
		t.Fatal(err)
	}
	if err := re.WritePart(ctx, 6, 5*part, bytes.NewReader(piece(6)), int64(len(piece(6))), sum(6)); err != nil {
		t.Fatal(err)
	}
	if got := re.(stripedUpload).Channels(); got != 2 {
		t.Fatalf("the resumed parts went over %d channels, want 2", got)
	}
	e, err := re.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Size != int64(len(content)) || !bytes.Equal(got, content) {
		t.Fatalf("the file has %d bytes (entry %d) and differs from the %d written", len(got), e.Size, len(content))
	}
	if n := leftovers(t, b); n != 0 {
		t.Fatalf("%d temporary files left", n)
	}
}
