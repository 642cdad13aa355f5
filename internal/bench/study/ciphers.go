package study

import (
	"io"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
)

// PaperCiphers are the ciphers of the paper's per-cipher section: the AEAD ciphers OpenSSH
// prefers and the CTR mode most centres still allow.
var PaperCiphers = []string{"aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com", "aes256-ctr"}

// PaperCipherOptions are the per-cipher runs of `bench paper`: one upload and one download of a
// file of size bytes per cipher, through sshapi limited to that cipher and through `sftp -c`,
// on loopback and through 1 Gbit/s × 50 ms wanem proxies.
func PaperCipherOptions(size int64, ciphers []string, progress io.Writer) TransferOptions {
	return TransferOptions{Size: size, Ciphers: ciphers, Compare: true, Progress: progress,
		Paths: []TransferPath{{}, {RTT: 50 * time.Millisecond, Rate: 125_000_000}}}
}

// CipherSection writes the per-cipher report into a Markdown document.
func CipherSection(w io.Writer, r *bench.TransferReport) error {
	if r == nil || len(r.Runs) == 0 {
		return nil
	}
	notes := append([]string{
		"CPU per GiB: CPU seconds divided by the GiB moved. sshapi's is the bench process's (the in-process sshapi with its SSH client, and the HTTP client that sends or reads the body); OpenSSH's client is the `sftp` process and its `ssh`, read from the bench process's waited-for children alone; \"bench process CPU during sftp\" is what the bench process itself spent while `sftp` ran: on loopback next to nothing, on the emulated path the in-process wanem proxies, which carry sshapi's bytes too and so are in sshapi's figure as well (subtract it for sshapi alone)",
		"sshapi uses its defaults for the path, so on the long path a download or an upload may stripe over several SFTP channels (the channel table of the transfer section shows what one channel does); `sftp` uses one channel",
	}, r.Meta.Notes...)
	return writeSection(w, "Ciphers", "One upload and one download through sshapi's API per SSH cipher, the system registered with only that cipher, beside OpenSSH `sftp -c` with the same cipher over the same path, with each side's CPU per GiB moved. \"sshapi ÷ sftp (MB/s)\" above 1 means sshapi was faster; \"sshapi ÷ OpenSSH client (CPU/GiB)\" above 1 means sshapi spent more CPU per GiB than OpenSSH's client.",
		notes, r.WriteCipherMarkdown, "")
}
