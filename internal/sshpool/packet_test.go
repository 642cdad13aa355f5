package sshpool

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path"
	"testing"

	"github.com/sshapi/sshapi/internal/sshtest"
)

func TestSFTPPacketFor(t *testing.T) {
	for _, tc := range []struct {
		version   string
		hasLimits bool
		want      int
	}{
		{"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u10", true, largeSFTPPacket},
		{"SSH-2.0-OpenSSH_8.0", false, smallSFTPPacket},      // before limits@openssh.com: reads cut at 64 KiB
		{"SSH-2.0-SomethingElse_1.0", true, smallSFTPPacket}, // another server's limits may be smaller
		{"SSH-2.0-OpenSSH_9.2p1", false, smallSFTPPacket},    // an sftp-server of its own
		{"SSH-2.0-Foo OpenSSH_9.2p1", true, smallSFTPPacket},
	} {
		if got := sftpPacketFor(tc.version, tc.hasLimits); got != tc.want {
			t.Errorf("sftpPacketFor(%q, %v) = %d, want %d", tc.version, tc.hasLimits, got, tc.want)
		}
	}
}

// TestSFTPLargePackets: on stock OpenSSH the pool's SFTP channels use OpenSSH's own request
// size, and a file written and read through them in pieces far larger than 64 KiB (what an older
// sftp-server cuts a read to) comes back byte for byte; a configured size is kept as is.
func TestSFTPLargePackets(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	data := make([]byte, 3<<20+12345)
	_, _ = rand.Read(data)
	for _, tc := range []struct {
		name string
		cfg  Config
		want int64 // what the wire learned (0: not asked)
	}{
		{"auto", Config{}, largeSFTPPacket},
		{"configured", Config{SFTPMaxPacket: 32 << 10}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newPool(t, tc.cfg)
			tg := target(t, srv, "packet-"+tc.name, srv.Signer)
			l, err := p.DedicatedSFTP(t.Context(), tg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if got := wireOf(l.c.client).sftpPacket.Load(); got != tc.want {
				t.Errorf("wire's SFTP packet = %d, want %d", got, tc.want)
			}
			name := path.Join(srv.Home, "packet-"+tc.name)
			f, err := l.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.ReadFrom(bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// The shared SFTP channel on the same connection reads it back in 1 MiB ReadAts.
			s, err := p.SFTP(t.Context(), tg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.Open(name)
			if err != nil {
				s.Done(err)
				t.Fatal(err)
			}
			got := make([]byte, 0, len(data))
			buf := make([]byte, 1<<20)
			for off := int64(0); ; {
				n, err := r.ReadAt(buf, off)
				got = append(got, buf[:n]...)
				off += int64(n)
				if err == io.EOF {
					break
				}
				if err != nil {
					s.Done(err)
					t.Fatal(err)
				}
			}
			_ = r.Close()
			s.Done(nil)
			if !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, want the %d written", len(got), len(data))
			}
		})
	}
}
