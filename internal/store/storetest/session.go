package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

func hashOf(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// testSessions checks the web interface's sessions: round trip, absolute and idle expiry,
// touch, per-user bound, delete, and sweeping.
func testSessions(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	idle := now.Add(-time.Hour)
	sess := &store.Session{IDHash: hashOf("a"), User: "alice", Groups: []string{"g1", "g2"}, ExpiresAt: now.Add(8 * time.Hour)}
	if err := s.CreateSession(ctx, &store.SessionParams{Session: sess}); err != nil {
		t.Fatal(err)
	}
	if sess.CreatedAt.IsZero() || !sess.LastSeenAt.Equal(sess.CreatedAt) {
		t.Fatalf("stamps: %+v", sess)
	}
	if err := s.CreateSession(ctx, &store.SessionParams{Session: &store.Session{IDHash: hashOf("a"), User: "bob", ExpiresAt: now.Add(time.Hour)}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := s.GetSession(ctx, hashOf("a"), now, idle)
	if err != nil {
		t.Fatal(err)
	}
	if got.User != "alice" || len(got.Groups) != 2 || got.Groups[1] != "g2" || !bytes.Equal(got.IDHash, hashOf("a")) || !got.ExpiresAt.Equal(sess.ExpiresAt.Truncate(time.Microsecond)) {
		t.Fatalf("got %+v", got)
	}
	if _, err := s.GetSession(ctx, hashOf("b"), now, idle); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	// Absolute expiry.
	if _, err := s.GetSession(ctx, hashOf("a"), now.Add(9*time.Hour), idle); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired: %v", err)
	}
	// Idle expiry, and a touch that renews it (never moving back).
	later := got.LastSeenAt.Add(30 * time.Minute)
	if _, err := s.GetSession(ctx, hashOf("a"), now, later); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("idle: %v", err)
	}
	if err := s.TouchSession(ctx, hashOf("a"), later.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchSession(ctx, hashOf("a"), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, err = s.GetSession(ctx, hashOf("a"), now, later); err != nil || !got.LastSeenAt.Equal(later.Add(time.Minute).Truncate(time.Microsecond)) {
		t.Fatalf("after touch: %+v, %v", got, err)
	}
	// The per-user bound drops the oldest.
	for _, id := range []string{"b", "c", "d"} {
		time.Sleep(2 * time.Millisecond)
		if err := s.CreateSession(ctx, &store.SessionParams{Session: &store.Session{IDHash: hashOf(id), User: "alice", ExpiresAt: now.Add(time.Hour)}, MaxPerUser: 2}); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true} {
		_, err := s.GetSession(ctx, hashOf(id), now, idle)
		if (err == nil) != want {
			t.Errorf("session %s: %v, want present %v", id, err, want)
		}
	}
	if err := s.DeleteSession(ctx, hashOf("c")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, hashOf("c")); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.GetSession(ctx, hashOf("c"), now, idle); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted: %v", err)
	}
	if err := s.CreateSession(ctx, &store.SessionParams{Session: &store.Session{IDHash: hashOf("e"), User: "bob", ExpiresAt: now.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteUserSessions(ctx, "alice"); err != nil || n != 1 {
		t.Fatalf("delete alice's: %d, %v", n, err)
	}
	n, err := s.DeleteExpiredSessions(ctx, now.Add(2*time.Hour), idle)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
}

// testLoginFlows checks that a pending sign-in is taken once, only with its kind, and not
// after it expired.
func testLoginFlows(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	f := &store.LoginFlow{KeyHash: hashOf("state"), Kind: "oidc", Data: []byte(`{"v":1}`), ExpiresAt: now.Add(10 * time.Minute)}
	if err := s.CreateLoginFlow(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateLoginFlow(ctx, f); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := s.TakeLoginFlow(ctx, hashOf("state"), "link", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other kind: %v", err)
	}
	// Taken once, even when asked for concurrently.
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 4 {
		wg.Go(func() {
			got, err := s.TakeLoginFlow(ctx, hashOf("state"), "oidc", now)
			if err == nil {
				if string(got.Data) != `{"v":1}` {
					t.Errorf("data %q", got.Data)
				}
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, store.ErrNotFound) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("taken %d times", wins)
	}
	link := &store.LoginFlow{KeyHash: hashOf("link"), Kind: "link", User: "dev", ExpiresAt: now.Add(time.Minute)}
	if err := s.CreateLoginFlow(ctx, link); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakeLoginFlow(ctx, hashOf("link"), "link", now.Add(2*time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired: %v", err)
	}
	if _, err := s.TakeLoginFlow(ctx, hashOf("link"), "link", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired link is gone: %v", err)
	}
	if err := s.CreateLoginFlow(ctx, &store.LoginFlow{KeyHash: hashOf("old"), Kind: "oidc", ExpiresAt: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpiredSessions(ctx, now, now.Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
}
