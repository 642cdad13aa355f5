package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// cpuPerGiB is a run's CPU seconds per GiB moved (sshd's with sshd), or 0 when nothing was.
func cpuPerGiB(s TransferRun, sshd bool) float64 {
	if s.Bytes <= 0 || s.Error != "" {
		return 0
	}
	c := s.CPUSeconds
	if sshd {
		c = s.SSHDCPUSeconds
	}
	return c / (float64(s.Bytes) / (1 << 30))
}

// WriteCipherMarkdown writes the per-cipher runs (those with a Cipher) as one table per path:
// per cipher and direction sshapi's and OpenSSH sftp's MB/s and CPU seconds per GiB side by
// side, with sshapi's divided by sftp's.
func (r *TransferReport) WriteCipherMarkdown(w io.Writer) error {
	var b strings.Builder
	for _, path := range r.Paths() {
		var ciphers []string
		for _, s := range r.Runs {
			if s.Path == path && s.Cipher != "" && !slices.Contains(ciphers, s.Cipher) {
				ciphers = append(ciphers, s.Cipher)
			}
		}
		if len(ciphers) == 0 {
			continue
		}
		fmt.Fprintf(&b, "#### Per cipher: %s\n\n", path)
		b.WriteString("| cipher | direction | sshapi MB/s | sftp MB/s | sshapi ÷ sftp (MB/s) | sshapi CPU s/GiB (bench process) | sftp client CPU s/GiB | sshapi ÷ sftp (CPU/GiB) | sshd CPU s/GiB under sshapi | sshd CPU s/GiB under sftp |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range ciphers {
			for _, dir := range []struct{ scenario, what string }{{TransferUpload, "upload"}, {TransferDownload, "download"}} {
				var api, peer *TransferRun
				for i, s := range r.Runs {
					if s.Path != path || s.Cipher != c || s.Scenario != dir.scenario {
						continue
					}
					if s.Target == BaselineTarget {
						api = &r.Runs[i]
					} else if s.Target == PeerSFTP {
						peer = &r.Runs[i]
					}
				}
				if api == nil && peer == nil {
					continue
				}
				mbps := func(s *TransferRun) string {
					switch {
					case s == nil:
						return "–"
					case s.Error != "":
						return "failed: " + truncate(strings.ReplaceAll(s.Error, "|", "/"), 80)
					}
					return fmt.Sprintf("%.1f", s.MBps)
				}
				cpu := func(s *TransferRun, sshd bool) string {
					if s != nil {
						if v := cpuPerGiB(*s, sshd); v > 0 {
							return fmt.Sprintf("%.2f", v)
						}
					}
					return "–"
				}
				ratio, cpuRatio := "–", "–"
				if api != nil && peer != nil && api.Error == "" && peer.Error == "" && peer.MBps > 0 {
					ratio = fmt.Sprintf("%.2f×", api.MBps/peer.MBps)
					if pc := cpuPerGiB(*peer, false); pc > 0 {
						cpuRatio = fmt.Sprintf("%.2f×", cpuPerGiB(*api, false)/pc)
					}
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, dir.what, mbps(api), mbps(peer), ratio,
					cpu(api, false), cpu(peer, false), cpuRatio, cpu(api, true), cpu(peer, true))
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
