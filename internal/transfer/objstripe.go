package transfer

import (
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/storage"
	sftpstore "github.com/sshapi/sshapi/internal/storage/sftp"
)

// Striped destination writes. An SFTP channel moves at most its window (2 MiB with OpenSSH)
// per round trip: about 40 MB/s at 50 ms, whatever the parts in flight. So the upload of a file
// to an SSH system writes its parts over all the end's channels (storage/sftp.NewStriped: part
// n over channel (n-1) mod k, counted from the file's own first channel so that files of one
// part still spread over the channels). Nothing else changes: the parts in flight, the memory
// they hold and the channels opened are the run's as before (its stream count, its share of
// Config.ObjectBufferBytes, one channel per stream taken from the pool under the owner's
// share), and the record of finished parts is the upload's, whichever channel carried them.

// uploadBackend is the backend file i's upload goes through: an SSH end's channels striped,
// starting at the file's own; a bucket's one backend.
func (ep *endpoint) uploadBackend(i int) storage.Backend {
	if !ep.sftp() || len(ep.fss) == 0 {
		return ep.backend(i)
	}
	k := len(ep.fss)
	fss := make([]*files.FS, k)
	for j := range k {
		fss[j] = ep.fss[(i+j)%k]
	}
	return sftpstore.NewStriped("/", fss...)
}

// stripedUpload is what a striped SFTP upload (storage/sftp) tells about itself.
type stripedUpload interface {
	// Channels is how many SFTP channels carried its parts.
	Channels() int
	// RemoteTempFile is the path of its temporary file on the server.
	RemoteTempFile() string
	// Release closes its extra channels' handles, leaving the temporary file for a resume.
	Release()
}

// releaseUpload closes up's extra handles when it has any (a file that failed this round
// resumes its upload in the next).
func releaseUpload(up storage.Upload) {
	if s, ok := up.(stripedUpload); ok {
		s.Release()
	}
}

// objectObserver, when set (only tests set it), is told how each file to an SSH system was
// written and verified: the channels that carried its parts in the attempt that finished it,
// and how its destination SHA-256 was had ("streamed" while the parts landed, "reread" after
// the commit).
var objectObserver func(dst string, channels int, verifiedBy string)

// objectPartWritten, when set (only tests set it), is called with the temporary file's remote
// path once a part is written to an SSH system, before the destination's streamed sum reads
// it: a test corrupts the file there to show that verification catches it.
var objectPartWritten func(tmp string, p storage.Part)

// observeObject tells objectObserver about a finished file.
func observeObject(it *Item, up storage.Upload, verifiedBy string) {
	if objectObserver == nil {
		return
	}
	n := 0
	if s, ok := up.(stripedUpload); ok {
		n = s.Channels()
	}
	objectObserver(it.Destination, n, verifiedBy)
}

// partWritten calls objectPartWritten for a part of upload up.
func partWritten(up storage.Upload, p storage.Part) {
	if objectPartWritten == nil {
		return
	}
	if s, ok := up.(stripedUpload); ok {
		objectPartWritten(s.RemoteTempFile(), p)
	}
}
