package files

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// channelRunner is sessionRunner that also opens subsystem channels (Channels), counting them.
type channelRunner struct {
	sessionRunner
	opened *atomic.Int64
}

type sessionPipe struct {
	io.Reader
	io.WriteCloser
	close func() error
}

func (p sessionPipe) Close() error { return p.close() }

// OpenSubsystem implements Channels.
func (r channelRunner) OpenSubsystem(_ context.Context, name string) (io.ReadWriteCloser, error) {
	s, err := r.conn.NewSession()
	if err != nil {
		return nil, err
	}
	in, _ := s.StdinPipe()
	out, _ := s.StdoutPipe()
	if err := s.RequestSubsystem(name); err != nil {
		_ = s.Close()
		return nil, err
	}
	r.opened.Add(1)
	return sessionPipe{Reader: out, WriteCloser: in, close: s.Close}, nil
}

// TestListStreamedMatchesWhole lists the same directories read whole (one ReadDir on the shared
// channel) and batch by batch over a channel of their own: every page, total, cursor and error
// must be the same, and the streamed reads must really use their own channels.
func TestListStreamedMatchesWhole(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	files := map[string]string{".hidden": "h", "sub/x.txt": "x", "sub/.h/y.txt": "y"}
	for i := range 700 { // several READDIR batches (OpenSSH sends about 100 names each)
		files[fmt.Sprintf("f%04d.txt", (i*331)%700)] = "x"
	}
	writeLocal(t, e.dir, files)
	if err := os.Symlink("f0001.txt", filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}
	var opened atomic.Int64
	whole := New(e.sftp, noRunner{t}, Options{})
	streamed := New(e.sftp, channelRunner{sessionRunner{e.conn}, &opened}, Options{StreamDirBytes: 0})
	var hybridOpened atomic.Int64 // a 700-entry directory is far below 1 MiB of directory
	hybrid := New(e.sftp, channelRunner{sessionRunner{e.conn}, &hybridOpened}, Options{StreamDirBytes: 1 << 20})
	tests := []struct {
		name string
		dir  string
		opts ListOptions
	}{
		{"all", e.dir, ListOptions{}},
		{"hidden", e.dir, ListOptions{ShowHidden: true}},
		{"first page", e.dir, ListOptions{Limit: 1}},
		{"middle page", e.dir, ListOptions{Limit: 50, Offset: 300}},
		{"after", e.dir, ListOptions{Limit: 10, After: "f0500.txt"}},
		{"after and offset", e.dir, ListOptions{Limit: 10, Offset: 5, After: "f0500.txt"}},
		{"after the last", e.dir, ListOptions{Limit: 10, After: "zzz"}},
		{"pattern", e.dir, ListOptions{Pattern: "f00?1.txt"}},
		{"recursive", e.dir, ListOptions{Recursive: true, ShowHidden: true, Limit: 20, After: "s"}},
		{"missing", filepath.Join(e.dir, "nope"), ListOptions{}},
		{"a file", filepath.Join(e.dir, "f0001.txt"), ListOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := opened.Load()
			want, werr := whole.List(ctx, tt.dir, tt.opts)
			got, gerr := streamed.List(ctx, tt.dir, tt.opts)
			if (werr == nil) != (gerr == nil) || (werr != nil && classify(werr) != classify(gerr)) {
				t.Fatalf("errors differ: whole %v, streamed %v", werr, gerr)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("listings differ:\nwhole    %+v\nstreamed %+v", want, got)
			}
			if werr == nil && opened.Load() == before {
				t.Fatal("the streamed listing opened no channel of its own")
			}
			h, herr := hybrid.List(ctx, tt.dir, tt.opts)
			if (werr == nil) != (herr == nil) || !reflect.DeepEqual(want, h) || hybridOpened.Load() != 0 {
				t.Fatalf("small directory with a size check: %v, %d channels opened, equal=%v", herr, hybridOpened.Load(), reflect.DeepEqual(want, h))
			}
		})
	}
	// Paging with after= visits every entry once, in order.
	var paged []string
	for after := ""; ; {
		l, err := streamed.List(ctx, e.dir, ListOptions{Limit: 64, After: after})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, names(l.Entries)...)
		if l.NextAfter == "" {
			break
		}
		after = l.NextAfter
	}
	all, err := whole.List(ctx, e.dir, ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(paged, names(all.Entries)) {
		t.Fatalf("after= pages: %d names, whole listing %d", len(paged), len(all.Entries))
	}
}

// heapPeak samples the live heap while fn runs and returns the peak above the level before.
func heapPeak(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > base && m.HeapAlloc-base > peak.Load() {
				peak.Store(m.HeapAlloc - base)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	return peak.Load()
}

// TestListLargeDirectoryStaysSmall lists a 200,000-entry directory with limit=1: read batch by
// batch into a bounded heap the listing's live heap stays a few MiB, where reading the
// directory whole holds every entry.
func TestListLargeDirectoryStaysSmall(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = 200_000
	for i := range n {
		f, err := os.Create(filepath.Join(e.dir, fmt.Sprintf("entry-with-a-longish-name-%07d", n-i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	var opened atomic.Int64
	streamed := New(e.sftp, channelRunner{sessionRunner{e.conn}, &opened}, Options{StreamDirBytes: 64 << 10})
	var l *Listing
	var err error
	peak := heapPeak(func() { l, err = streamed.List(ctx, e.dir, ListOptions{Limit: 1}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != 1 || l.Entries[0].Name != "entry-with-a-longish-name-0000001" || l.Total != n || l.NextAfter == "" {
		t.Fatalf("page = %+v total %d next %q", names(l.Entries), l.Total, l.NextAfter)
	}
	var wholePeak uint64
	wholePeak = heapPeak(func() { _, err = e.sftp.ReadDir(e.dir) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries, limit=1: streamed listing peak live heap %.1f MiB; ReadDir of the whole directory %.1f MiB",
		n, float64(peak)/(1<<20), float64(wholePeak)/(1<<20))
	if opened.Load() != 1 {
		t.Errorf("opened %d channels, want 1", opened.Load())
	}
	if peak > 8<<20 {
		t.Errorf("streamed listing peaked at %d bytes of live heap, want under 8 MiB", peak)
	}
}

// TestArchiveLargeDirectoryStreamed archives a directory of more than archiveSortMax entries
// read batch by batch: every entry comes once with its content, the first archiveSortMax in
// name order, and the directory was read over a channel of its own.
func TestArchiveLargeDirectoryStreamed(t *testing.T) {
	e := newEnv(t)
	const n = archiveSortMax + 500
	files := map[string]string{"tree/sub/inner.txt": "inner"}
	for i := range n - 1 {
		files[fmt.Sprintf("tree/f%06d", (i*7)%(n-1))] = fmt.Sprint(i)
	}
	writeLocal(t, e.dir, files)
	var opened atomic.Int64
	f := New(e.sftp, channelRunner{sessionRunner{e.conn}, &opened}, Options{StreamDirBytes: 0})
	var buf bytes.Buffer
	if err := f.WriteArchive(context.Background(), filepath.Join(e.dir, "tree"), "tar", &buf); err != nil {
		t.Fatal(err)
	}
	got, order := readArchive(t, "tar", buf.Bytes())
	if len(order) != n+2 || len(got) != n+2 { // + "tree/" and "tree/sub/inner.txt"
		t.Fatalf("%d entries (%d distinct), want %d", len(order), len(got), n+2)
	}
	for name, content := range files {
		if got[name] != content {
			t.Fatalf("%s: %q, want %q", name, got[name], content)
		}
	}
	if !slices.IsSorted(order[1 : archiveSortMax+1]) {
		t.Error("the first archiveSortMax entries are not in name order")
	}
	if opened.Load() < 2 {
		t.Errorf("opened %d channels, want one per directory", opened.Load())
	}
}
