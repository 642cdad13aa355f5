package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/sqlite"
)

// watchedCtx counts the calls of its Done method: database/sql and the driver call it to
// watch a context for its end (starting a goroutine per statement to do so).
type watchedCtx struct {
	context.Context
	watched atomic.Int32
}

func (c *watchedCtx) Done() <-chan struct{} {
	c.watched.Add(1)
	return c.Context.Done()
}

// lookups are the reads on the request path that run without watching their context
// (lookupCtx), each with its wanted answer on the database withLookups fills.
var lookups = []struct {
	name string
	run  func(ctx context.Context, db *sqlite.DB) error
}{
	{"GetSystemCredential", func(ctx context.Context, db *sqlite.DB) error {
		sys, cred, err := db.GetSystemCredential(ctx, "alice", "c")
		if err == nil && (sys.Host != "h" || cred == nil || cred.Username != "u") {
			err = fmt.Errorf("got %+v, %+v", sys, cred)
		}
		return err
	}},
	{"GetSystem", func(ctx context.Context, db *sqlite.DB) error {
		_, err := db.GetSystem(ctx, "alice", "c")
		return err
	}},
	{"GetCredential", func(ctx context.Context, db *sqlite.DB) error {
		_, err := db.GetCredential(ctx, "alice", "c")
		return err
	}},
	{"ListGrants", func(ctx context.Context, db *sqlite.DB) error {
		gs, err := db.ListGrants(ctx, &store.GrantListParams{Owner: "alice", SystemID: "c", Now: time.Now()})
		if err == nil && len(gs) != 1 {
			err = fmt.Errorf("got %d grants, want 1", len(gs))
		}
		return err
	}},
	{"IsDisabled", func(ctx context.Context, db *sqlite.DB) error {
		off, err := db.IsDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "c"})
		if err == nil && !off {
			err = errors.New("not disabled")
		}
		return err
	}},
	{"AccessStamp", func(ctx context.Context, db *sqlite.DB) error {
		st, err := db.AccessStamp(ctx, &store.AccessStampParams{Owner: "alice", SystemID: "c", Caller: "alice", Now: time.Now()})
		if err == nil && (st.SystemUpdated == 0 || st.CredentialGeneration == 0 || !st.Disabled) {
			err = fmt.Errorf("got %+v", st)
		}
		return err
	}},
	{"GetUserGroups", func(ctx context.Context, db *sqlite.DB) error {
		g, err := db.GetUserGroups(ctx, &store.UserGroupsParams{User: "alice"})
		if err == nil && len(g) != 1 {
			err = fmt.Errorf("got groups %q", g)
		}
		return err
	}},
	{"GetLink", func(ctx context.Context, db *sqlite.DB) error {
		_, err := db.GetLink(ctx, &store.LinkGetParams{ID: "l1"})
		return err
	}},
}

// withLookups opens a database with a system, its credential, a grant, a link, a disabled
// switch and a user's groups, for lookups.
func withLookups(t *testing.T) *sqlite.DB {
	db := open(t, filepath.Join(t.TempDir(), "sshapi.db"))
	ctx := t.Context()
	steps := []error{
		db.CreateSystem(ctx, &store.System{Owner: "alice", ID: "c", Host: "h", Port: 22}),
		db.PutCredential(ctx, &store.Credential{Owner: "alice", SystemID: "c", Username: "u", KeyType: "ed25519"}),
		db.CreateGrant(ctx, &store.GrantCreateParams{Grant: &store.Grant{Owner: "alice", SystemID: "c", Principal: "user:bob", Path: "/", Access: "read"}}),
		db.CreateLink(ctx, &store.LinkCreateParams{Link: &store.Link{ID: "l1", Owner: "alice", SystemID: "c", Path: "/f", Access: "read", ExpiresAt: time.Now().Add(time.Hour)}}),
		db.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "c", Disabled: true}),
		db.PutUserGroups(ctx, &store.UserGroupsParams{User: "alice", Groups: []string{"hpc"}}),
	}
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestLookupsDoNotWatchTheirContext: the short reads of the request path neither watch their
// context (no goroutine per statement in database/sql and the driver waits for its end) nor
// run when it has ended already.
func TestLookupsDoNotWatchTheirContext(t *testing.T) {
	db := withLookups(t)
	for _, l := range lookups {
		t.Run(l.name, func(t *testing.T) {
			ctx := &watchedCtx{Context: t.Context()}
			if err := l.run(ctx, db); err != nil {
				t.Fatal(err)
			}
			if n := ctx.watched.Load(); n != 0 {
				t.Errorf("the lookup watched its context (%d calls of Done)", n)
			}
			done, cancel := context.WithCancel(t.Context())
			cancel()
			if err := l.run(done, db); !errors.Is(err, context.Canceled) {
				t.Errorf("with a cancelled context: %v, want context.Canceled", err)
			}
		})
	}
}

// TestAuditBatchWatchesItsContextOncePerBatch: appending a batch of audit entries watches its
// context for the transaction (BEGIN waits for the write lock), not once more per entry. (The
// count for the transaction varies by a call or two with when database/sql's goroutine that
// watches the transaction's context first runs, so the test asks for less than one per entry.)
func TestAuditBatchWatchesItsContextOncePerBatch(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "sshapi.db"))
	watched := func(n int) int32 {
		es := make([]store.AuditEntry, n)
		for i := range es {
			es[i] = store.AuditEntry{Owner: "alice", Action: "command.run", ID: store.NewAuditID()}
		}
		ctx := &watchedCtx{Context: t.Context()}
		if err := db.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: es}); err != nil {
			t.Fatal(err)
		}
		return ctx.watched.Load()
	}
	const many = 50
	if one, more := watched(1), watched(many); more-one >= many-1 {
		t.Errorf("a batch of 1 entry watched its context %d times, one of %d entries %d times", one, many, more)
	}
	es, err := db.QueryAudit(t.Context(), &store.AuditQueryParams{Limit: 100})
	if err != nil || len(es) != many+1 {
		t.Fatalf("QueryAudit: %d entries, %v; want %d", len(es), err, many+1)
	}
}
