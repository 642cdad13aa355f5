package sftp

// A test of ReadDirContext's close, sent without waiting for its reply (sshapi's
// third_party/pkg-sftp.patch).

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestReadDirCloseNotAwaited: ReadDirContext returns the directory once its last READDIR is
// answered, with the CLOSE of the handle sent but unanswered; the reply, when it comes later,
// leaves the connection in step (a second listing over it gets its own replies). The scripted
// server holds every CLOSE reply until the test releases it: upstream, which waits for the
// reply, fails after the deadline below.
func TestReadDirCloseNotAwaited(t *testing.T) {
	cr, sw := io.Pipe() // the client reads what the server writes
	sr, cw := io.Pipe() // the server reads what the client writes
	closes := make(chan struct{}, 2)
	release := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		defer sw.Close()
		readdirs := 0
		for {
			typ, body, err := readFrame(sr)
			if err != nil {
				return
			}
			var id uint32
			if len(body) >= 4 {
				id = uint32(body[0])<<24 | uint32(body[1])<<16 | uint32(body[2])<<8 | uint32(body[3])
			}
			var answer []byte
			switch typ {
			case sshFxpInit:
				answer = frame(sshFxpVersion, uint32(sftpProtocolVersion))
			case sshFxpOpendir:
				answer = frame(sshFxpHandle, id, "d")
			case sshFxpReaddir:
				if readdirs++; readdirs%2 == 1 {
					answer = frame(sshFxpName, id, uint32(3), ".", ".", uint32(0), "a", "a", uint32(sshFileXferAttrSize), uint32(0), uint32(7), "..", "..", uint32(0))
				} else {
					answer = frame(sshFxpStatus, id, uint32(sshFxEOF), "", "")
				}
			case sshFxpClose:
				closes <- struct{}{}
				<-release
				answer = frame(sshFxpStatus, id, uint32(sshFxOk), "", "")
			default:
				answer = frame(sshFxpStatus, id, uint32(sshFxOPUnsupported), "", "")
			}
			if _, err := sw.Write(answer); err != nil {
				return
			}
		}
	}()
	c, err := NewClientPipe(cr, closeBoth{cw, cr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		<-served
	})
	list := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			infos, err := c.ReadDirContext(context.Background(), "/d")
			if err == nil && (len(infos) != 1 || infos[0].Name() != "a" || infos[0].Size() != 7) {
				t.Errorf("listed %v", infos)
			}
			done <- err
		}()
		return done
	}
	done := list()
	<-closes
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("ReadDirContext still waits for the reply to its CLOSE")
	}
	close(release) // the first CLOSE is answered now, the second at once
	if err := <-list(); err != nil {
		t.Fatal(err)
	}
	<-closes
}
