package digest

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/shell"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// run executes script on srv's sshd as its test user, with stdin as its input, and returns
// stdout and stderr.
func run(t *testing.T, srv *sshtest.Server, script, stdin string) (string, string) {
	t.Helper()
	c, err := ssh.Dial("tcp", srv.Addr, srv.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdin, s.Stdout, s.Stderr = strings.NewReader(stdin), &stdout, &stderr
	if err := s.Run(script); err != nil {
		var ee *ssh.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
	}
	return stdout.String(), stderr.String()
}

func TestScriptAgainstSSHD(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	dir := srv.MkTemp(t)
	// Hostile names: each tries to break the line format or forge another file's line.
	names := []string{"plain", "-dash", "sp ace", "quo'te", "nl\nx", "cr\rx", `back\slash`, `both\n` + "\nreal", "--",
		"forge\n0 " + strings.Repeat("0", 64), "forge2\n" + strings.Repeat("0", 64) + "  plain"}
	hashers := map[Algorithm]func() hash.Hash{SHA256: sha256.New, SHA512: sha512.New, SHA1: sha1.New, MD5: md5.New}
	var files []File
	content := map[string][]byte{}
	for i, n := range names {
		p := filepath.Join(dir, n)
		b := bytes.Repeat([]byte{byte(i)}, 1000+i)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		content[p] = b
		// Alternate big (per-file, on stdin) and small (one coreutils command).
		size := int64(len(b))
		if i%2 == 0 {
			size = -1
		}
		files = append(files, File{p, size})
	}
	// Errors, each both big and small.
	sub := filepath.Join(dir, "sub")
	_ = os.Mkdir(sub, 0o755)
	missing := filepath.Join(dir, "missing\n0 "+strings.Repeat("1", 64))
	files = append(files, File{missing, -1}, File{missing, 10}, File{sub, -1}, File{sub, 10})

	// A fake openssl that passes the self-test but prints zeros for anything else shows which
	// files the fast tool hashed; a wrong one must be ignored.
	bin := srv.MkTemp(t)
	fake := func(name, body string) string {
		d := filepath.Join(bin, name)
		_ = os.Mkdir(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, "openssl"), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return "PATH=" + d + ":$PATH; "
	}
	zeros := fake("zeros", `in=$(cat); if [ "$in" = abc ]; then exec printf '%s *stdin\n' `+
		`ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad; fi; printf '%064d *stdin\n' 0`+"\n")
	wrong := fake("wrong", "cat >/dev/null; echo 'deadbeef *stdin'\n")

	for _, tc := range []struct {
		name      string
		alg       Algorithm
		prefix    string
		fastZeros bool // big files come from the zeros fake
	}{
		{"openssl sha256", SHA256, "", false},
		{"openssl sha512", SHA512, "", false},
		{"openssl sha1", SHA1, "", false},
		{"openssl md5", MD5, "", false},
		{"fast tool chosen", SHA256, zeros, true},
		{"wrong openssl falls back", SHA256, wrong, false},
		{"no openssl falls back", SHA256, "PATH=/nonexistent:/usr/bin:/bin; hash -r; ", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := run(t, srv, tc.prefix+Script(tc.alg, files), "")
			res := ParseOutput(tc.alg, files, stdout, stderr)
			if len(res) != len(files) {
				t.Fatalf("%d results for %d files", len(res), len(files))
			}
			for i, f := range files {
				b, ok := content[f.Path]
				if !ok {
					if res[i].Sum != "" || res[i].Err == "" {
						t.Errorf("%q (size %d): sum %q err %q, want an error", f.Path, f.Size, res[i].Sum, res[i].Err)
					}
					continue
				}
				h := hashers[tc.alg]()
				h.Write(b)
				want := hex.EncodeToString(h.Sum(nil))
				if tc.fastZeros && f.big() {
					want = strings.Repeat("0", 64)
				}
				if res[i].Sum != want {
					t.Errorf("%q (size %d): sum %q (err %q), want %s", f.Path, f.Size, res[i].Sum, res[i].Err, want)
				}
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Algorithm
		size int
	}{{"sha256", SHA256, 32}, {"SHA512", SHA512, 64}, {"sha1", SHA1, 20}, {"Md5", MD5, 16}, {"crc32", "", 0}} {
		a, err := Parse(tc.in)
		if a != tc.want || (err == nil) != (tc.want != "") || a.Size() != tc.size {
			t.Errorf("Parse(%q) = %q, %v (size %d)", tc.in, a, err, a.Size())
		}
	}
}

// TestParseCoreutils covers GNU's escaping of awkward names and rejects lines that are not sums.
func TestParseCoreutils(t *testing.T) {
	sum := strings.Repeat("a", 64)
	out := sum + "  /plain\n\\" + sum + "  /new\\nline\\\\x\n" + sum + " */bin ary\n" + "zz" + sum[2:] + "  /nothex\n" + sum[1:] + "  /short\n"
	got := parseCoreutils(out, 64)
	want := map[string]string{"/plain": sum, "/new\nline\\x": sum, "/bin ary": sum}
	if len(got) != len(want) {
		t.Errorf("got %q, want %q", got, want)
	}
	for name, s := range want {
		if got[name] != s {
			t.Errorf("%q: %q, want %q", name, got[name], s)
		}
	}
}

// TestStreamScriptAgainstSSHD feeds StreamScript its blocks in several lines, as a copy
// completes ranges, and checks the digest against the file's (or its prefix's) own; a missing
// file gives no digest.
func TestStreamScriptAgainstSSHD(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	dir := srv.MkTemp(t)
	const block = 4096
	data := make([]byte, 10*block+123) // a short last block
	for i := range data {
		data[i] = byte(i * 7)
	}
	name := filepath.Join(dir, "hostile 'name'\n; rm -rf x")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	for _, tc := range []struct {
		name  string
		path  string
		lines []int64
		want  string
	}{
		{"whole file in pieces", name, []int64{3, 4, 4}, sum(data)},
		{"whole file at once", name, []int64{11}, sum(data)},
		{"prefix only", name, []int64{2, 1}, sum(data[:3*block])},
		{"nothing fed", name, nil, sum(nil)},
		{"missing file", filepath.Join(dir, "missing"), []int64{1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in strings.Builder
			for _, n := range tc.lines {
				in.WriteString(StreamLine(n))
			}
			stdout, stderr := run(t, srv, StreamScript(SHA256, tc.path, block), in.String())
			if got := ParseStreamOutput(SHA256, stdout); got != tc.want {
				t.Fatalf("digest %q, want %q (stdout %q, stderr %q)", got, tc.want, stdout, stderr)
			}
		})
	}
}

// TestToolsRememberSelfTest: a Tools tests openssl in its first script with a big file and not
// in the next; after openssl disappears the failed hash makes it test again, and a failed test
// sends later scripts straight to coreutils. A nil Tools tests every time.
func TestToolsRememberSelfTest(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	dir := srv.MkTemp(t)
	data := []byte("hashed as a big file")
	files := []File{{filepath.Join(dir, "f"), -1}}
	if err := os.WriteFile(files[0].Path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	want := hex.EncodeToString(h[:])
	bin := srv.MkTemp(t) // an openssl that fails as a missing one would
	if err := os.WriteFile(filepath.Join(bin, "openssl"), []byte("#!/bin/sh\necho openssl: not found >&2; exit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noOpenSSL := "PATH=" + bin + ":$PATH; "
	tools := new(Tools)
	for i, step := range []struct {
		prefix   string
		selfTest bool   // the script tests openssl
		tool     string // the script's hashing tool: "openssl", "sha256sum" or "" (per the test)
		sum      bool   // the file gets its digest
	}{
		{"", true, "", true},
		{"", false, "openssl", true},
		{noOpenSSL, false, "openssl", false}, // remembered openssl is gone: an error, and forgotten
		{noOpenSSL, true, "", true},          // tested again: fails, so coreutils
		{noOpenSSL, false, "sha256sum", true},
		{"", false, "sha256sum", true}, // a failed test is kept
	} {
		script := tools.Script(SHA256, files)
		if got := strings.Contains(script, "printf abc"); got != step.selfTest {
			t.Fatalf("step %d: self-test in script %v, want %v:\n%s", i, got, step.selfTest, script)
		}
		if first := map[string]string{"openssl": "h='openssl dgst -sha256 -r'\n", "sha256sum": "h=sha256sum\n"}[step.tool]; first != "" &&
			!strings.HasPrefix(script, first) {
			t.Fatalf("step %d: want tool %s:\n%s", i, step.tool, script)
		}
		stdout, stderr := run(t, srv, step.prefix+script, "")
		res := tools.ParseOutput(SHA256, files, stdout, stderr)[0]
		if step.sum && res.Sum != want || !step.sum && (res.Sum != "" || !strings.Contains(res.Err, "openssl")) {
			t.Fatalf("step %d: %+v, want sum %v (stdout %q)", i, res, step.sum, stdout)
		}
	}
	var none *Tools
	for range 2 {
		script := none.Script(SHA256, files)
		if !strings.Contains(script, "printf abc") {
			t.Fatalf("a nil Tools skipped the self-test:\n%s", script)
		}
		stdout, stderr := run(t, srv, script, "")
		if res := none.ParseOutput(SHA256, files, stdout, stderr)[0]; res.Sum != want {
			t.Fatalf("nil Tools: %+v", res)
		}
	}
}

// TestArgvSmallFilesNoShell: with only small files Argv is the coreutils tool itself, and its
// output alone (no "--" line) parses to every file's digest, hostile names included; a missing
// file gets an error naming it. With a big file it is a `sh -c` script.
func TestArgvSmallFilesNoShell(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	dir := srv.MkTemp(t)
	var files []File
	want := map[string]string{}
	for i, n := range []string{"plain", "-dash", "sp ace", "quo'te", "nl\nx", `back\slash`, "--"} {
		p := filepath.Join(dir, n)
		b := bytes.Repeat([]byte{byte(i)}, 10+i)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		want[p] = hex.EncodeToString(s[:])
		files = append(files, File{p, int64(len(b))})
	}
	files = append(files, File{filepath.Join(dir, "missing"), 1})
	argv := (*Tools)(nil).Argv(SHA256, files)
	if argv[0] != "sha256sum" || argv[1] != "--" || len(argv) != len(files)+2 {
		t.Fatalf("argv %q, want sha256sum -- and the files", argv)
	}
	stdout, stderr := run(t, srv, shell.Command(argv...), "")
	for i, r := range new(Tools).ParseOutput(SHA256, files, stdout, stderr) {
		p := files[i].Path
		if w, ok := want[p]; ok && r.Sum != w || !ok && (r.Sum != "" || !strings.Contains(r.Err, "missing")) {
			t.Errorf("%q: %+v, want %q", p, r, w)
		}
	}
	if argv := new(Tools).Argv(SHA256, append(files, File{"big", BigFile})); argv[0] != "sh" || argv[1] != "-c" {
		t.Errorf("with a big file: argv %q, want sh -c SCRIPT", argv)
	}
}
