// Copyright 2026 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package ssh

// sshapi patch: SendRequestThen.

import (
	"io"
	"testing"
	"time"
)

// TestSendRequestThen: what sent writes goes out before the reply is awaited (the server here
// answers only once it has that data: a SendRequestThen that waited first would hang), sent
// runs once whatever the answer, and not at all for a request that could not be sent.
func TestSendRequestThen(t *testing.T) {
	for _, want := range []bool{true, false} {
		client, server, mux := channelPair(t)
		go func() {
			for r := range server.incomingRequests {
				buf := make([]byte, 4)
				_, err := io.ReadFull(server, buf)
				r.Reply(err == nil && string(buf) == "init" && want, nil)
			}
		}()
		sentCalls := 0
		done := make(chan struct{})
		var ok bool
		var err error
		go func() {
			defer close(done)
			ok, err = client.SendRequestThen("subsystem", true, nil, func() {
				sentCalls++
				if _, err := client.Write([]byte("init")); err != nil {
					t.Errorf("write: %v", err)
				}
			})
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second): // a hang fails
			t.Fatal("SendRequestThen waited for the reply before calling sent")
		}
		if err != nil || ok != want || sentCalls != 1 {
			t.Errorf("SendRequestThen: got %v, %v with sent called %d times; want %v, nil, once", ok, err, sentCalls, want)
		}
		client.Close()
		server.Close()
		mux.Close()
	}

	client, server, mux := channelPair(t)
	defer mux.Close()
	server.Close()
	client.Close()
	called := false
	if _, err := client.SendRequestThen("subsystem", true, nil, func() { called = true }); err == nil || called {
		t.Errorf("on a closed channel: got %v with sent called %v; want an error, not called", err, called)
	}
}
