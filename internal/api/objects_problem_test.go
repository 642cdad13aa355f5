package api

import (
	"fmt"
	"io/fs"
	"net/http"
	"testing"

	"github.com/sshapi/sshapi/internal/storage"
)

// TestStorageProblem: storage errors a caller can act on are 4xx problems, the conflicts naming
// the field at fault where there is one.
func TestStorageProblem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		field  string
	}{
		{"exists", fmt.Errorf("copy /a: %w", fs.ErrExist), http.StatusConflict, ""},
		{"not found", fmt.Errorf("stat /a: %w", fs.ErrNotExist), http.StatusNotFound, ""},
		{"source changed during a move", fmt.Errorf("rename /a: %w", storage.ErrChanged), http.StatusConflict, "source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := storageProblem(objErr(tc.err))
			if !ok || p.Status != tc.status {
				t.Fatalf("%v: problem %+v (%v), want status %d", tc.err, p, ok, tc.status)
			}
			field := ""
			if len(p.Errors) > 0 {
				field = p.Errors[0].Field
			}
			if field != tc.field {
				t.Fatalf("%v: field %q, want %q", tc.err, field, tc.field)
			}
		})
	}
}
