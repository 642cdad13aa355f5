// Copyright 2026 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package ssh

import (
	"io"
	"testing"
)

// sshapi patch: StartRequest returns once the request is sent, so the caller writes its data
// before the reply. The server here answers the subsystem request only after it has read the
// channel's first data, and refuses the second request: a StartRequest that waited for the
// reply would never see it.
func TestStartRequestDataBeforeReply(t *testing.T) {
	server := func(ch Channel, reqs <-chan *Request, t *testing.T) {
		defer ch.Close()
		for i := 0; ; i++ {
			req, ok := <-reqs
			if !ok {
				return
			}
			if i > 0 {
				req.Reply(false, nil)
				continue
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(ch, buf); err != nil {
				t.Errorf("read: %v", err)
				return
			}
			req.Reply(string(buf) == "INIT", nil)
			if _, err := ch.Write([]byte("VERS")); err != nil {
				t.Errorf("write: %v", err)
			}
		}
	}
	conn := dial(server, t)
	defer conn.Close()
	ch, reqs, err := conn.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go DiscardRequests(reqs)
	wait, err := StartRequest(ch, "subsystem", Marshal(struct{ Name string }{"sftp"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("INIT")); err != nil {
		t.Fatal(err)
	}
	if ok, err := wait(); !ok || err != nil {
		t.Fatalf("reply: %v, %v; want true", ok, err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(ch, buf); err != nil || string(buf) != "VERS" {
		t.Fatalf("read %q, %v", buf, err)
	}
	// The next request waits its turn as with SendRequest, and a refusal reads as one.
	wait, err = StartRequest(ch, "exec", Marshal(struct{ Command string }{"true"}))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := wait(); ok || err != nil {
		t.Fatalf("second reply: %v, %v; want false", ok, err)
	}
	if ok, err := ch.SendRequest("exec", true, nil); ok || err != nil {
		t.Fatalf("SendRequest after StartRequest: %v, %v; want false", ok, err)
	}
}
