package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hostileNames are file names that break naive shell quoting or option parsing. The payloads
// create files named by pwnedMarkers(token) in the command's working directory (the remote
// home) if they ever run.
func hostileNames(token string) []string {
	names := []string{
		"with space",
		"quote'single",
		"two''quotes'",
		`dq"double`,
		"back`touch pwned-bt`tick",
		"$(touch pwned-dollar)",
		"semi;touch pwned-semi",
		"new\nline\ntouch pwned-nl",
		"-leading-dash",
		"--help",
		"-rf",
		"star*?[ab]",
		"ünïcødé-日本語",
		`back\slash\n`,
		"tab\there",
		"bang!&amp|pipe>redir<in",
		"'; touch pwned-close; '",
		"L" + strings.Repeat("x", 254), // 255 bytes
		strings.Repeat("é", 127) + "z", // 255 bytes, multibyte
		"${IFS}$HOME%s%n~",             // expansions and format verbs
	}
	for i := range names {
		names[i] = strings.ReplaceAll(names[i], "pwned-", "pwned-"+token+"-")
	}
	return names
}

// pwnedMarkers are the files the payloads of hostileNames(token) would create.
func pwnedMarkers(token string) []string {
	var out []string
	for _, m := range []string{"bt", "dollar", "semi", "nl", "close"} {
		out = append(out, "pwned-"+token+"-"+m)
	}
	return out
}

// TestHostileNamesEveryOperation runs every operation over each hostile name and checks that
// the name stayed data: contents and locations are exactly as asked and no payload ran.
func TestHostileNamesEveryOperation(t *testing.T) {
	e := newEnv(t)
	f := e.fs(Options{})
	ctx := context.Background()

	token := filepath.Base(e.dir)
	for i, name := range hostileNames(token) {
		work := filepath.Join(e.dir, "w"+string(rune('a'+i)))
		t.Run(strings.ToValidUTF8(strings.ReplaceAll(name, token, "")[:min(len(name), 20)], "?"), func(t *testing.T) {
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(f.Mkdir(ctx, work, false))
			for _, d := range []string{"links", "copy", "moved", "arch", "ex", "d"} {
				must(f.Mkdir(ctx, path.Join(work, d), false))
			}
			p := path.Join(work, name)
			content := []byte("content of " + name + "\nsecond line\n")
			sum := sha256.Sum256(content)

			// upload, with checksum verification
			res, err := f.Upload(ctx, p, bytes.NewReader(content), UploadOptions{SHA256: hex.EncodeToString(sum[:])})
			must(err)
			if got, _ := os.ReadFile(p); !bytes.Equal(got, content) || res.Size != int64(len(content)) {
				t.Fatalf("uploaded content = %q (size %d)", got, res.Size)
			}

			// list and stat
			l, err := f.List(ctx, work, ListOptions{Pattern: ""})
			must(err)
			var names []string
			for _, en := range l.Entries {
				names = append(names, en.Name)
			}
			if !slices.Contains(names, name) {
				t.Fatalf("list %v lacks %q", names, name)
			}
			st, err := f.Stat(ctx, p, false)
			must(err)
			if st.Name != name || st.Type != TypeFile || st.Size != int64(len(content)) {
				t.Fatalf("stat = %+v", st)
			}

			// read: stream, head, tail
			rf, _, err := f.OpenRead(ctx, p)
			must(err)
			got, err := io.ReadAll(rf)
			rf.Close()
			must(err)
			if !bytes.Equal(got, content) {
				t.Fatalf("read %q", got)
			}
			head, err := f.Head(ctx, p, 0, 1)
			must(err)
			if string(head.Data) != "content of "+name+"\n" && !strings.Contains(name, "\n") {
				t.Fatalf("head = %q", head.Data)
			}
			tail, err := f.Tail(ctx, p, 0, 1)
			must(err)
			if string(tail.Data) != "second line\n" {
				t.Fatalf("tail = %q", tail.Data)
			}

			// server-side commands
			cs, err := f.Checksum(ctx, p, "sha256")
			must(err)
			if cs != hex.EncodeToString(sum[:]) {
				t.Fatalf("checksum %s", cs)
			}
			ft, err := f.FileType(ctx, p)
			must(err)
			if !strings.Contains(ft, "text") {
				t.Fatalf("file type %q", ft)
			}
			must(f.Chmod(ctx, p, 0o640, false))
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
				t.Fatalf("mode %v", fi.Mode())
			}
			must(f.Chown(ctx, p, testServer.User, "", false))
			must(f.Symlink(ctx, "../"+name, path.Join(work, "links", name)))
			if tgt, _ := os.Readlink(filepath.Join(work, "links", name)); tgt != "../"+name {
				t.Fatalf("link target %q", tgt)
			}
			must(f.Copy(ctx, p, path.Join(work, "copy", name), CopyOptions{}))
			if got, _ := os.ReadFile(filepath.Join(work, "copy", name)); !bytes.Equal(got, content) {
				t.Fatalf("copy content %q", got)
			}
			must(f.Mkdir(ctx, path.Join(work, "d", name), false))
			must(f.Copy(ctx, path.Join(work, "d", name), path.Join(work, "d", "c"), CopyOptions{Recursive: true}))
			must(f.Compress(ctx, []string{p, path.Join(work, "d")}, path.Join(work, "arch", name), "tar.gz"))
			must(f.Extract(ctx, path.Join(work, "arch", name), path.Join(work, "ex")))
			if got, _ := os.ReadFile(filepath.Join(work, "ex", name)); !bytes.Equal(got, content) {
				t.Fatalf("extracted content %q", got)
			}
			var tarOut bytes.Buffer
			must(f.WriteArchive(ctx, path.Join(work, "links"), "tar", &tarOut))
			if !bytes.Contains(tarOut.Bytes(), []byte(name)) {
				t.Fatalf("archive lacks the link name")
			}

			// move and remove
			must(f.Move(ctx, p, path.Join(work, "moved", name), false))
			must(f.Remove(ctx, path.Join(work, "links", name), false))
			must(f.Remove(ctx, path.Join(work, "copy", name), false))
			must(f.Remove(ctx, path.Join(work, "d", name), false))

			want := []string{
				".", "arch", "arch/" + name, "copy", "d", "d/c", "ex", "ex/" + name, "ex/d", "ex/d/c", "ex/d/" + name,
				"links", "moved", "moved/" + name,
			}
			if got := localTree(t, work); !slices.Equal(got, sortedStrings(want)) {
				t.Fatalf("tree after operations:\n got %q\nwant %q", got, sortedStrings(want))
			}
		})
	}
	for _, m := range pwnedMarkers(token) {
		_ = filepath.WalkDir(testServer.Home, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == m {
				t.Errorf("payload ran: %s exists", p)
			}
			return nil
		})
	}
}

// TestHostilePath uploads through a path whose components spell a command substitution with an
// absolute path; it must create directories, not run anything.
func TestHostilePath(t *testing.T) {
	e := newEnv(t)
	f := e.fs(Options{})
	ctx := context.Background()
	marker := "/tmp/pwned-" + filepath.Base(e.dir)
	p := e.dir + "/$(touch " + marker + ")/`touch " + marker + "`"
	if _, err := f.Upload(ctx, p, strings.NewReader("x"), UploadOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Checksum(ctx, p, "md5"); err != nil {
		t.Fatal(err)
	}
	if err := f.Copy(ctx, p, p+".copy", CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("payload ran: %s exists", marker)
	}
	if got, err := os.ReadFile(p + ".copy"); err != nil || string(got) != "x" {
		t.Fatalf("copy = %q, %v", got, err)
	}
}

// localTree lists every path below root (relative, sorted), read directly on this machine.
func localTree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sortedStrings(out)
}

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
