package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// CPU figures of a transfer run.
const (
	cpuAll   = iota // the bench process and its children
	cpuChild        // the children alone (the OpenSSH clients)
	cpuOwn          // the bench process alone
	cpuSSHD         // the sshd process tree
)

// cpuPerGiB is one of a run's CPU figures in seconds per GiB moved, or 0 when nothing was.
func cpuPerGiB(s TransferRun, which int) float64 {
	if s.Bytes <= 0 || s.Error != "" {
		return 0
	}
	c := s.CPUSeconds
	switch which {
	case cpuChild:
		c = s.ChildCPUSeconds
	case cpuOwn:
		c = s.CPUSeconds - s.ChildCPUSeconds
	case cpuSSHD:
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
		b.WriteString("| cipher | direction | sshapi MB/s | sftp MB/s | sshapi ÷ sftp (MB/s) | sshapi CPU s/GiB (bench process) | OpenSSH client CPU s/GiB (sftp + ssh) | sshapi ÷ OpenSSH client (CPU/GiB) | bench process CPU s/GiB during sftp | sshd CPU s/GiB under sshapi | sshd CPU s/GiB under sftp |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range ciphers {
			// The upload from a warm pool (TransferBench.Warm) and the one with digest=none
			// (TransferBench.NoDigest), where measured, are rows of their own beside the same
			// sftp put.
			for _, dir := range []struct{ scenario, pool, digest, what string }{
				{TransferUpload, "", "", "upload"},
				{TransferUpload, PoolWarm, "", "upload" + poolLabel(PoolWarm)},
				{TransferUpload, PoolWarm, DigestNone, "upload" + digestLabel(DigestNone) + poolLabel(PoolWarm)},
				{TransferDownload, "", "", "download"},
			} {
				var api, peer *TransferRun
				for i, s := range r.Runs {
					if s.Path != path || s.Cipher != c || s.Scenario != dir.scenario {
						continue
					}
					if s.Target == BaselineTarget && s.Digest == dir.digest && (s.Pool == dir.pool || s.Pool == PoolCold && dir.pool == "") {
						api = &r.Runs[i]
					} else if s.Target == PeerSFTP {
						peer = &r.Runs[i]
					}
				}
				if api == nil && (peer == nil || dir.pool != "") {
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
				cpu := func(s *TransferRun, which int) string {
					if s != nil {
						if v := cpuPerGiB(*s, which); v > 0 {
							return fmt.Sprintf("%.2f", v)
						}
					}
					return "–"
				}
				ratio, cpuRatio := "–", "–"
				if api != nil && peer != nil && api.Error == "" && peer.Error == "" && peer.MBps > 0 {
					ratio = fmt.Sprintf("%.2f×", api.MBps/peer.MBps)
					if pc := cpuPerGiB(*peer, cpuChild); pc > 0 {
						cpuRatio = fmt.Sprintf("%.2f×", cpuPerGiB(*api, cpuAll)/pc)
					}
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, dir.what, mbps(api), mbps(peer), ratio,
					cpu(api, cpuAll), cpu(peer, cpuChild), cpuRatio, cpu(peer, cpuOwn), cpu(api, cpuSSHD), cpu(peer, cpuSSHD))
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
