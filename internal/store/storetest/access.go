package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

func testGrants(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "hpc"))
	mustCreate(t, s, sampleSystem("carol", "hpc"))
	now := time.Now().UTC()
	grants := []*store.Grant{
		{Owner: "alice", SystemID: "hpc", Principal: "user:bob", Path: "/scratch/p", Access: "read"},
		{Owner: "alice", SystemID: "hpc", Principal: "group:proj", Path: "/scratch/q", Access: "write", ExpiresAt: now.Add(time.Hour)},
		{Owner: "alice", SystemID: "hpc", Principal: "user:bob", Path: "/old", Access: "read", ExpiresAt: now.Add(-time.Hour)},
		{Owner: "carol", SystemID: "hpc", Principal: "authenticated", Path: "/pub", Access: "read"},
	}
	for _, g := range grants {
		if err := s.CreateGrant(ctx, &store.GrantCreateParams{Grant: g}); err != nil {
			t.Fatal(err)
		}
		if g.ID == "" || g.CreatedAt.IsZero() {
			t.Fatalf("grant without id or time: %+v", g)
		}
	}
	err := s.CreateGrant(ctx, &store.GrantCreateParams{Grant: &store.Grant{Owner: "alice", SystemID: "nope", Principal: "user:bob", Path: "/", Access: "read"}})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("grant on a missing system: %v, want ErrNotFound", err)
	}
	all, err := s.ListGrants(ctx, &store.GrantListParams{Owner: "alice", SystemID: "hpc"})
	if err != nil || len(all) != 3 {
		t.Fatalf("alice's grants: %d, %v; want 3", len(all), err)
	}
	if all[1].Principal != "group:proj" || !all[1].ExpiresAt.Equal(grants[1].ExpiresAt) || all[1].Path != "/scratch/q" || all[1].Access != "write" {
		t.Fatalf("round trip: %+v, want %+v", all[1], *grants[1])
	}
	live, err := s.ListGrants(ctx, &store.GrantListParams{Owner: "alice", SystemID: "hpc", Now: now})
	if err != nil || len(live) != 2 {
		t.Fatalf("unexpired grants: %d, %v; want 2", len(live), err)
	}
	mine, err := s.ListGrants(ctx, &store.GrantListParams{Principals: []string{"user:bob", "authenticated"}, Now: now})
	if err != nil || len(mine) != 2 || mine[0].Owner != "alice" || mine[1].Owner != "carol" {
		t.Fatalf("bob's grants across owners: %+v, %v", mine, err)
	}
	if err := s.DeleteGrant(ctx, &store.GrantDeleteParams{Owner: "carol", SystemID: "hpc", ID: grants[0].ID}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting alice's grant as carol: %v, want ErrNotFound", err)
	}
	if err := s.DeleteGrant(ctx, &store.GrantDeleteParams{Owner: "alice", SystemID: "hpc", ID: grants[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSystem(ctx, "alice", "hpc"); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.ListGrants(ctx, &store.GrantListParams{Owner: "alice", SystemID: "hpc"}); len(left) != 0 {
		t.Fatalf("grants outlived their system: %+v", left)
	}
}

func testLinks(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "hpc"))
	now := time.Now().UTC()
	l := &store.Link{ID: "l1", Owner: "alice", SystemID: "hpc", Path: "/data/f", Access: "read",
		SecretHash: bytes.Repeat([]byte{7}, 32), ExpiresAt: now.Add(time.Hour), MaxUses: 3}
	if err := s.CreateLink(ctx, &store.LinkCreateParams{Link: l}); err != nil {
		t.Fatal(err)
	}
	dup := *l
	if err := s.CreateLink(ctx, &store.LinkCreateParams{Link: &dup}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate link id: %v, want ErrConflict", err)
	}
	got, err := s.GetLink(ctx, &store.LinkGetParams{ID: "l1"})
	if err != nil || !bytes.Equal(got.SecretHash, l.SecretHash) || got.MaxUses != 3 || got.Uses != 0 || !got.ExpiresAt.Equal(l.ExpiresAt.Truncate(time.Microsecond)) {
		t.Fatalf("get link: %+v, %v", got, err)
	}
	// Concurrent uses never exceed max_uses.
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.UseLink(ctx, &store.LinkUseParams{ID: "l1", Now: time.Now()}); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 3 {
		t.Fatalf("%d uses succeeded, want max_uses 3", ok)
	}
	exp := &store.Link{ID: "l2", Owner: "alice", SystemID: "hpc", Path: "/d", Access: "write", SecretHash: []byte{1}, ExpiresAt: now.Add(time.Minute)}
	if err := s.CreateLink(ctx, &store.LinkCreateParams{Link: exp}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UseLink(ctx, &store.LinkUseParams{ID: "l2", Now: now.Add(2 * time.Minute)}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired link used: %v", err)
	}
	if _, err := s.UseLink(ctx, &store.LinkUseParams{ID: "l2", Now: now}); err != nil {
		t.Fatalf("unbounded link: %v", err)
	}
	list, err := s.ListLinks(ctx, &store.LinkListParams{Owner: "alice", SystemID: "hpc"})
	if err != nil || len(list) != 2 || list[0].Uses != 3 || list[1].Uses != 1 {
		t.Fatalf("list links: %+v, %v", list, err)
	}
	if err := s.DeleteLink(ctx, &store.LinkDeleteParams{Owner: "bob", SystemID: "hpc", ID: "l2"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoking alice's link as bob: %v", err)
	}
	if err := s.DeleteLink(ctx, &store.LinkDeleteParams{Owner: "alice", SystemID: "hpc", ID: "l2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UseLink(ctx, &store.LinkUseParams{ID: "l2", Now: now}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoked link used: %v", err)
	}
}

func testAuditQuery(t *testing.T, s store.Store) {
	ctx := t.Context()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	entries := []store.AuditEntry{
		{Time: base, Owner: "alice", Action: "files.ls", SystemID: "hpc", Paths: []string{"/scratch/p"}, Status: 200},
		{Time: base.Add(time.Second), Owner: "bob", SystemOwner: "alice", Action: "files.download", SystemID: "hpc", Paths: []string{"/scratch/p/f"}, Status: 200, Bytes: 42, RequestID: "r1"},
		{Time: base.Add(2 * time.Second), Owner: "link:l1", SystemOwner: "alice", Action: "link.download", SystemID: "hpc", Paths: []string{"/data/x"}, Status: 200, LinkID: "l1"},
		{Time: base.Add(3 * time.Second), Owner: "bob", Action: "files.ls", SystemID: "own", Paths: []string{"/home/bob"}, Status: 200},
		{Time: base.Add(4 * time.Second), Owner: "carol", Action: "files.ls", SystemID: "x", Status: 404},
	}
	for _, e := range entries {
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		p    store.AuditQueryParams
		want []string // principal/action, newest first
	}{
		{"visible to alice", store.AuditQueryParams{Visible: "alice"}, []string{"link:l1/link.download", "bob/files.download", "alice/files.ls"}},
		{"visible to bob", store.AuditQueryParams{Visible: "bob"}, []string{"bob/files.ls", "bob/files.download"}},
		{"principal", store.AuditQueryParams{Principal: "bob"}, []string{"bob/files.ls", "bob/files.download"}},
		{"system owner", store.AuditQueryParams{SystemOwner: "alice"}, []string{"link:l1/link.download", "bob/files.download", "alice/files.ls"}},
		{"path prefix", store.AuditQueryParams{Visible: "alice", PathPrefix: "/scratch/p"}, []string{"bob/files.download", "alice/files.ls"}},
		{"since until", store.AuditQueryParams{Since: base.Add(time.Second), Until: base.Add(3 * time.Second)}, []string{"link:l1/link.download", "bob/files.download"}},
		{"limit", store.AuditQueryParams{Limit: 2}, []string{"carol/files.ls", "bob/files.ls"}},
	}
	for _, c := range cases {
		got, err := s.QueryAudit(ctx, &c.p)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range got {
			names = append(names, e.Owner+"/"+e.Action)
		}
		if fmt.Sprint(names) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.name, names, c.want)
		}
	}
	page1, _ := s.QueryAudit(ctx, &store.AuditQueryParams{Limit: 3})
	page2, _ := s.QueryAudit(ctx, &store.AuditQueryParams{Limit: 3, BeforeSeq: page1[2].Seq})
	if len(page2) != 2 || page2[0].Seq >= page1[2].Seq {
		t.Fatalf("paging: %+v after %+v", page2, page1)
	}
	got, _ := s.QueryAudit(ctx, &store.AuditQueryParams{Principal: "bob", System: "hpc"})
	if len(got) != 1 || got[0].Bytes != 42 || got[0].RequestID != "r1" || got[0].Status != 200 || fmt.Sprint(got[0].Paths) != "[/scratch/p/f]" || !got[0].Time.Equal(base.Add(time.Second)) {
		t.Fatalf("round trip: %+v", got)
	}
	n, err := s.PurgeAudit(ctx, &store.AuditPurgeParams{Before: base.Add(2 * time.Second)})
	if err != nil || n != 2 {
		t.Fatalf("purge: %d, %v; want 2", n, err)
	}
	if left, _ := s.QueryAudit(ctx, &store.AuditQueryParams{}); len(left) != 3 {
		t.Fatalf("%d entries after purge, want 3", len(left))
	}
}

func testDisabled(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "hpc"))
	mustCreate(t, s, sampleSystem("bob", "hpc"))
	check := func(owner, id string, want bool) {
		t.Helper()
		got, err := s.IsDisabled(ctx, &store.DisabledParams{Owner: owner, SystemID: id})
		if err != nil || got != want {
			t.Fatalf("IsDisabled(%s, %s) = %v, %v; want %v", owner, id, got, err, want)
		}
	}
	check("alice", "hpc", false)
	if err := s.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "hpc", Disabled: true}); err != nil {
		t.Fatal(err)
	}
	_ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "hpc", Disabled: true}) // idempotent
	check("alice", "hpc", true)
	check("alice", "", false)
	check("bob", "hpc", false)
	_ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "bob", Disabled: true})
	check("bob", "hpc", true)
	_ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "hpc"})
	check("alice", "hpc", false)
	all, err := s.ListAllSystems(ctx)
	if err != nil || len(all) != 2 || all[0].Owner != "alice" || all[1].Owner != "bob" {
		t.Fatalf("all systems: %+v, %v", all, err)
	}
}

// testAccessStamp: every change that can withdraw access changes the stamp, and nothing else
// does.
func testAccessStamp(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "hpc"))
	mustPut(t, s, sampleCredential("alice", "hpc", "alice"))
	g := store.Grant{Owner: "alice", SystemID: "hpc", Principal: "user:bob", Path: "/p", Access: "read", ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.CreateGrant(ctx, &store.GrantCreateParams{Grant: &g}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutUserGroups(ctx, &store.UserGroupsParams{User: "bob", Groups: []string{"proj42"}}); err != nil {
		t.Fatal(err)
	}
	p := &store.AccessStampParams{Owner: "alice", SystemID: "hpc", Caller: "bob", GrantID: g.ID, Now: time.Now()}
	stamp := func() store.AccessStamp {
		t.Helper()
		st, err := s.AccessStamp(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := stamp()
	if st.SystemUpdated == 0 || st.CredentialGeneration == 0 || !st.GrantLive || st.Disabled || st.CallerGroups != `["proj42"]` {
		t.Fatalf("stamp of a usable grant: %+v", st)
	}
	// Unrelated changes leave it alone.
	mustCreate(t, s, sampleSystem("alice", "other"))
	_ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "carol", Disabled: true})
	if got := stamp(); got != st {
		t.Fatalf("unrelated changes moved the stamp: %+v, was %+v", got, st)
	}
	changes := []struct {
		name  string
		apply func()
		undo  func()
	}{
		{"grant expired", func() { p.Now = g.ExpiresAt.Add(time.Second) }, func() { p.Now = time.Now() }},
		{"caller disabled", func() { _ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "bob", Disabled: true}) },
			func() { _ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "bob"}) }},
		{"owner disabled", func() { _ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", Disabled: true}) },
			func() { _ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "alice"}) }},
		{"system disabled", func() { _ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "hpc", Disabled: true}) },
			func() { _ = s.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "hpc"}) }},
		{"caller's groups changed", func() { _ = s.PutUserGroups(ctx, &store.UserGroupsParams{User: "bob", Groups: []string{"other"}}) },
			func() { _ = s.PutUserGroups(ctx, &store.UserGroupsParams{User: "bob", Groups: []string{"proj42"}}) }},
	}
	for _, c := range changes {
		c.apply()
		if got := stamp(); got == st {
			t.Fatalf("%s: stamp unchanged", c.name)
		}
		c.undo()
		if got := stamp(); got != st {
			t.Fatalf("%s undone: %+v, was %+v", c.name, got, st)
		}
	}
	time.Sleep(time.Millisecond) // updated_at has microsecond resolution: a later update must differ
	sys, err := s.GetSystem(ctx, "alice", "hpc")
	if err != nil {
		t.Fatal(err)
	}
	sys.RootDir = "/elsewhere"
	sys.UpdatedAt = time.Time{}
	if err := s.UpdateSystem(ctx, sys); err != nil {
		t.Fatal(err)
	}
	if got := stamp(); got.SystemUpdated == st.SystemUpdated {
		t.Fatalf("system changed, stamp %+v unchanged", got)
	}
	st = stamp()
	mustPut(t, s, sampleCredential("alice", "hpc", "alice"))
	if got := stamp(); got.CredentialGeneration == st.CredentialGeneration {
		t.Fatalf("credential replaced, stamp %+v unchanged", got)
	}
	if err := s.DeleteGrant(ctx, &store.GrantDeleteParams{Owner: "alice", SystemID: "hpc", ID: g.ID}); err != nil {
		t.Fatal(err)
	}
	if got := stamp(); got.GrantLive {
		t.Fatalf("grant revoked, stamp %+v still live", got)
	}
	if err := s.DeleteSystem(ctx, "alice", "hpc"); err != nil {
		t.Fatal(err)
	}
	if got := stamp(); got.SystemUpdated != 0 || got.CredentialGeneration != 0 {
		t.Fatalf("system deleted: %+v", got)
	}
}

func testUserGroups(t *testing.T, s store.Store) {
	ctx := t.Context()
	if g, err := s.GetUserGroups(ctx, &store.UserGroupsParams{User: "bob"}); err != nil || g != nil {
		t.Fatalf("unknown user: %v, %v", g, err)
	}
	for _, want := range [][]string{{"proj42", "lab"}, {"lab"}, nil} {
		if err := s.PutUserGroups(ctx, &store.UserGroupsParams{User: "bob", Groups: want}); err != nil {
			t.Fatal(err)
		}
		if g, err := s.GetUserGroups(ctx, &store.UserGroupsParams{User: "bob"}); err != nil || fmt.Sprint(g) != fmt.Sprint(want) {
			t.Fatalf("groups %v, %v; want %v", g, err, want)
		}
	}
}

func testAuditBatch(t *testing.T, s store.Store) {
	ctx := t.Context()
	es := []store.AuditEntry{{Owner: "a", Action: "x", RequestID: "1"}, {Owner: "a", Action: "x", RequestID: "2"}, {Owner: "a", Action: "x", RequestID: "3"}}
	if err := s.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: es}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.QueryAudit(ctx, &store.AuditQueryParams{Principal: "a"})
	if len(got) != 3 || got[0].RequestID != "3" || got[2].RequestID != "1" || got[0].Time.IsZero() {
		t.Fatalf("batch: %+v", got)
	}
	bad := []store.AuditEntry{{Owner: "a", Action: "y"}, {Owner: "", Action: "y"}}
	if err := s.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: bad}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("invalid entry in a batch: %v", err)
	}
	if got, _ := s.QueryAudit(ctx, &store.AuditQueryParams{Principal: "a"}); len(got) != 3 {
		t.Fatalf("a refused batch wrote %d entries", len(got)-3)
	}
	// Entries with an id are stored once however often they are appended (a spool replayed
	// after a crash); entries without one are not compared.
	withID := []store.AuditEntry{{Owner: "b", Action: "x", ID: "e1"}, {Owner: "b", Action: "x", ID: "e2"}, {Owner: "b", Action: "x"}}
	for range 3 {
		if err := s.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: withID}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.QueryAudit(ctx, &store.AuditQueryParams{Principal: "b"}); len(got) != 2+3 {
		t.Fatalf("3 appends of 2 entries with ids and 1 without stored %d entries, want 5", len(got))
	}
}

// testCreateLimit: creates given a Max, racing on several systems at once, leave exactly Max
// grants (links) on each and refuse the rest with ErrLimit; a deleted one makes room; a missing
// system is ErrNotFound, not ErrLimit.
func testCreateLimit(t *testing.T, s store.Store) {
	const limit, racers, systems = 5, 20, 16
	ctx := t.Context()
	for i := range systems {
		mustCreate(t, s, sampleSystem("alice", fmt.Sprint("hpc", i)))
	}
	kinds := []struct {
		name   string
		create func(id string, n int) error
		list   func(id string) ([]string, error)
		del    func(id, item string) error
	}{
		{
			name: "grants",
			create: func(id string, n int) error {
				return s.CreateGrant(ctx, &store.GrantCreateParams{Max: limit, Grant: &store.Grant{Owner: "alice", SystemID: id,
					Principal: fmt.Sprintf("user:u%d", n), Path: "/p", Access: "read"}})
			},
			list: func(id string) ([]string, error) {
				gs, err := s.ListGrants(ctx, &store.GrantListParams{Owner: "alice", SystemID: id})
				var ids []string
				for _, g := range gs {
					ids = append(ids, g.ID)
				}
				return ids, err
			},
			del: func(id, item string) error {
				return s.DeleteGrant(ctx, &store.GrantDeleteParams{Owner: "alice", SystemID: id, ID: item})
			},
		},
		{
			name: "links",
			create: func(id string, n int) error {
				return s.CreateLink(ctx, &store.LinkCreateParams{Max: limit, Link: &store.Link{ID: fmt.Sprintf("l-%s-%d", id, n), Owner: "alice",
					SystemID: id, Path: "/p", Access: "read", SecretHash: []byte{1}, ExpiresAt: time.Now().Add(time.Hour)}})
			},
			list: func(id string) ([]string, error) {
				ls, err := s.ListLinks(ctx, &store.LinkListParams{Owner: "alice", SystemID: id})
				var ids []string
				for _, l := range ls {
					ids = append(ids, l.ID)
				}
				return ids, err
			},
			del: func(id, item string) error {
				return s.DeleteLink(ctx, &store.LinkDeleteParams{Owner: "alice", SystemID: id, ID: item})
			},
		},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			start := make(chan struct{})
			errs := make([][racers]error, systems)
			var wg sync.WaitGroup
			for sys := range systems {
				for i := range racers {
					wg.Go(func() {
						<-start
						errs[sys][i] = k.create(fmt.Sprint("hpc", sys), i)
					})
				}
			}
			close(start)
			wg.Wait()
			for sys := range systems {
				id, ok := fmt.Sprint("hpc", sys), 0
				for _, err := range errs[sys] {
					var le *store.LimitError
					switch {
					case err == nil:
						ok++
					case !errors.Is(err, store.ErrLimit):
						t.Errorf("racing create on %s: %v, want nil or ErrLimit", id, err)
					case !errors.As(err, &le) || le.Max != limit || le.SystemID != id:
						t.Errorf("limit error %v, want a *store.LimitError for %s with Max %d", err, id, limit)
					}
				}
				ids, err := k.list(id)
				if err != nil || ok != limit || len(ids) != limit {
					t.Errorf("%s: %d of %d racing creates succeeded, %d stored (%v); want %d", id, ok, racers, len(ids), err, limit)
				}
			}
			if t.Failed() {
				return
			}
			ids, _ := k.list("hpc0")
			if err := k.del("hpc0", ids[0]); err != nil {
				t.Fatal(err)
			}
			if err := k.create("hpc0", racers); err != nil {
				t.Fatalf("create after a delete made room: %v", err)
			}
			if err := k.create("hpc0", racers+1); !errors.Is(err, store.ErrLimit) {
				t.Fatalf("create on a full system: %v, want ErrLimit", err)
			}
			if err := k.create("nope", 0); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("create on a missing system: %v, want ErrNotFound", err)
			}
		})
	}
}

// testSystemLimit: racing CreateSystemAtMost calls for two owners leave exactly Max systems for
// each and refuse the rest with a *store.LimitError naming the owner; one owner's full share
// does not refuse another's; a deleted system makes room; a duplicate ID below the limit is
// still ErrConflict.
func testSystemLimit(t *testing.T, s store.Store) {
	const limit, racers = 5, 20
	ctx := t.Context()
	owners := []string{"alice", "bob"}
	start := make(chan struct{})
	errs := make([][racers]error, len(owners))
	var wg sync.WaitGroup
	for o, owner := range owners {
		for i := range racers {
			wg.Go(func() {
				<-start
				errs[o][i] = s.CreateSystemAtMost(ctx, &store.SystemCreateParams{System: sampleSystem(owner, fmt.Sprint("s", i)), Max: limit})
			})
		}
	}
	close(start)
	wg.Wait()
	for o, owner := range owners {
		ok := 0
		for _, err := range errs[o] {
			var le *store.LimitError
			switch {
			case err == nil:
				ok++
			case !errors.As(err, &le) || !errors.Is(err, store.ErrLimit) || le.Max != limit || le.Owner != owner || le.What != "systems":
				t.Errorf("racing create for %s: %v, want nil or a *store.LimitError for %s's systems with Max %d", owner, err, owner, limit)
			}
		}
		got, err := s.ListSystems(ctx, owner)
		if err != nil || ok != limit || len(got) != limit {
			t.Errorf("%s: %d of %d racing creates succeeded, %d stored (%v); want %d", owner, ok, racers, len(got), err, limit)
		}
	}
	if t.Failed() {
		return
	}
	if err := s.CreateSystemAtMost(ctx, &store.SystemCreateParams{System: sampleSystem("carol", "s0"), Max: limit}); err != nil {
		t.Fatalf("carol's first system while alice and bob are full: %v", err)
	}
	got, _ := s.ListSystems(ctx, "alice")
	if err := s.DeleteSystem(ctx, "alice", got[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSystemAtMost(ctx, &store.SystemCreateParams{System: sampleSystem("alice", got[1].ID), Max: limit}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate id below the limit: %v, want ErrConflict", err)
	}
	if err := s.CreateSystemAtMost(ctx, &store.SystemCreateParams{System: sampleSystem("alice", "new"), Max: limit}); err != nil {
		t.Fatalf("create after a delete made room: %v", err)
	}
	if err := s.CreateSystemAtMost(ctx, &store.SystemCreateParams{System: sampleSystem("alice", "more"), Max: limit}); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("create for a full owner: %v, want ErrLimit", err)
	}
	if err := s.CreateSystem(ctx, sampleSystem("alice", "unlimited")); err != nil {
		t.Fatalf("CreateSystem (no Max) for a full owner: %v", err)
	}
}
