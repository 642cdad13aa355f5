package postgres_test

import (
	"sync"
	"testing"

	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/postgres"
	"github.com/sshapi/sshapi/internal/store/storetest"
)

func open(t *testing.T, url string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestContract runs the store contract suite on a real PostgreSQL, one database per case.
func TestContract(t *testing.T) {
	c := pgtest.New(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, c.NewDatabase(t)) })
}

// TestConcurrentMigrations: instances starting at once on an empty database migrate it once.
func TestConcurrentMigrations(t *testing.T) {
	c := pgtest.New(t)
	url := c.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := postgres.Open(t.Context(), url)
			if err != nil {
				errs <- err
				return
			}
			_ = db.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	db := open(t, url)
	if err := db.CreateSystem(t.Context(), &store.System{Owner: "a", ID: "s", Host: "h", Port: 22}); err != nil {
		t.Fatal(err)
	}
}
