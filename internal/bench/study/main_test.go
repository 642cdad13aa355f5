package study

import (
	"os"
	"testing"
	"time"
)

// TestMain shortens the wait for a quiet machine before each section: the tests assert that the
// sections run and render, not their figures, and a busy CI machine would otherwise add up to
// two minutes to each.
func TestMain(m *testing.M) {
	settleMax = 3 * time.Second
	os.Exit(m.Run())
}
