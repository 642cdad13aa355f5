// Package digest computes file checksums on a server through one POSIX shell script, with the
// fastest tool the server has. `openssl dgst` uses the CPU's SHA extensions and hashes sha256
// three to four times faster than coreutils' sha256sum, so a script first checks openssl against
// a known digest and falls back to coreutils (`sha256sum`, …) when openssl is missing or wrong.
//
// Large files are fed to the tool on stdin (`tool < file`), one file per command, so no file
// name ever appears in the tool's output: each result is a line "<index> <hex>" or
// "<index> ! <message>" that a hostile name cannot forge. Small files, where starting a process
// per file would cost more than the faster hash saves, are hashed with one coreutils command
// over all of them, whose output GNU escapes (a name with a newline, carriage return or
// backslash gets a line starting with a backslash).
package digest

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sshapi/sshapi/internal/shell"
)

// Algorithm is a checksum algorithm a server can compute.
type Algorithm string

// The algorithms Script supports.
const (
	SHA256 Algorithm = "sha256"
	SHA512 Algorithm = "sha512"
	SHA1   Algorithm = "sha1"
	MD5    Algorithm = "md5"
)

// BigFile is the size from which a file is hashed on its own with the fastest tool; smaller
// files share one coreutils process. Starting openssl costs a few milliseconds, which its speed
// (about 3 ms less CPU per MiB for sha256) wins back from about 2 MiB.
const BigFile = 2 << 20

type algInfo struct {
	idx      int    // index in Tools
	size     int    // digest bytes
	coreutil string // coreutils command
	abc      string // hex digest of "abc", the self-test
}

var algs = map[Algorithm]algInfo{
	SHA256: {0, 32, "sha256sum", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	SHA512: {1, 64, "sha512sum", "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"},
	SHA1:   {2, 20, "sha1sum", "a9993e364706816aba3e25717850c26c9cd0d89d"},
	MD5:    {3, 16, "md5sum", "900150983cd24fb0d6963f7d28e17f72"},
}

// Parse returns the algorithm named s (case-insensitive).
func Parse(s string) (Algorithm, error) {
	a := Algorithm(strings.ToLower(s))
	if _, ok := algs[a]; !ok {
		return "", fmt.Errorf("unknown algorithm %q (want sha256, sha512, sha1 or md5)", s)
	}
	return a, nil
}

// Size is the digest length in bytes (0 for an unknown algorithm).
func (a Algorithm) Size() int { return algs[a].size }

// File is one file to hash: its path on the server and its size, or -1 when unknown (hashed on
// its own, as a big file).
type File struct {
	Path string
	Size int64
}

func (f File) big() bool { return f.Size < 0 || f.Size >= BigFile }

// Script returns a POSIX sh script that hashes files with a. Its output is for ParseOutput; it
// exits 0 unless a small file could not be read. With a big file it first tests openssl; see
// Tools for a script that tests it once per server.
func Script(a Algorithm, files []File) string { return script(a, files, openSSLUntested) }

// What a script knows of openssl on its server for its algorithm.
const (
	openSSLUntested uint32 = iota // test it, and print the result (selfTestLine)
	openSSLPassed                 // use it
	openSSLFailed                 // use coreutils
)

// selfTestLine is the first line of a script's output when it tested openssl: "openssl yes" or
// "openssl no". No line of ParseOutput's starts with a letter.
const selfTestLine = "openssl "

func script(a Algorithm, files []File, openssl uint32) string {
	info := algs[a]
	var sb strings.Builder
	var small []string
	for i, f := range files {
		if !f.big() {
			small = append(small, shell.Quote(f.Path))
			continue
		}
		if sb.Len() == 0 {
			// h is the tool: openssl when it hashes "abc" right, else coreutils. d hashes file $2
			// from stdin and prints "$1 <digest>", or "$1 ! <error on one line>".
			switch openssl {
			case openSSLPassed:
				fmt.Fprintf(&sb, "h='openssl dgst -%s -r'\n", a)
			case openSSLFailed:
				fmt.Fprintf(&sb, "h=%s\n", info.coreutil)
			default:
				fmt.Fprintf(&sb, "h=%s t=no; case $(printf abc | openssl dgst -%s -r 2>/dev/null) in '%s '*) h='openssl dgst -%s -r' t=yes;; esac; echo %s$t\n",
					info.coreutil, a, info.abc, a, selfTestLine)
			}
			sb.WriteString(`d() { if o=$( { $h; } 2>&1 <"$2" ); then printf '%s %s\n' "$1" "${o%% *}"; else printf '%s ! ' "$1"; printf '%s' "$o" | tr '\n\r' '  '; echo; fi; }` + "\n")
		}
		fmt.Fprintf(&sb, "d %d %s\n", i, shell.Quote(f.Path))
	}
	if len(small) > 0 {
		sb.WriteString("echo --\n")
		sb.WriteString(info.coreutil + " -- " + strings.Join(small, " ") + "\n")
	}
	return sb.String()
}

// Argv returns the command, as arguments for shell.Command (which runs them under `env
// LC_ALL=C`), that hashes files with a, using what t knows of openssl (t may be nil). With only
// small files it is the coreutils tool itself (`sha256sum -- FILE…`): the login shell execs env,
// env execs the tool, so the command starts one process on the server and no shell of its own.
// Otherwise it is `sh -c` with t.Script(a, files). Its output is for t.ParseOutput either way.
func (t *Tools) Argv(a Algorithm, files []File) []string {
	for _, f := range files {
		if f.big() {
			return []string{"sh", "-c", t.Script(a, files)}
		}
	}
	argv := make([]string, 0, len(files)+2)
	argv = append(argv, algs[a].coreutil, "--")
	for _, f := range files {
		argv = append(argv, f.Path)
	}
	return argv
}

// Tools remembers what the scripts run on one server found out about its openssl, per
// algorithm, so that only the first script with a big file tests it (a `printf abc | openssl`
// pipeline, a few milliseconds of process starts) and later ones use the answer. An openssl
// error in a result makes it test again next time. A nil *Tools remembers nothing; the zero
// value is ready and safe for concurrent use.
type Tools struct {
	openssl [4]atomic.Uint32 // by algInfo.idx
}

// Script is Script(a, files) using what t knows: a script for a server whose openssl passed (or
// failed) the self-test does not test it again.
func (t *Tools) Script(a Algorithm, files []File) string {
	if t == nil {
		return Script(a, files)
	}
	return script(a, files, t.openssl[algs[a].idx].Load())
}

// ParseOutput is ParseOutput(a, files, stdout, stderr) for a script from t.Script, remembering
// the script's self-test result, and forgetting that openssl passed when a big file's error
// names openssl (it is gone or broken since).
func (t *Tools) ParseOutput(a Algorithm, files []File, stdout, stderr string) []Result {
	res := ParseOutput(a, files, stdout, stderr)
	if t == nil {
		return res
	}
	known := &t.openssl[algs[a].idx]
	switch line, _, _ := strings.Cut(stdout, "\n"); line {
	case selfTestLine + "yes":
		known.Store(openSSLPassed)
	case selfTestLine + "no":
		known.Store(openSSLFailed)
	}
	for i, r := range res {
		if files[i].big() && strings.Contains(r.Err, "openssl") {
			known.Store(openSSLUntested)
		}
	}
	return res
}

// Result is one file's digest, or why it has none.
type Result struct {
	// Sum is the lowercase hex digest; empty when the file could not be hashed.
	Sum string
	// Err is the tool's or shell's message when Sum is empty (for a small file, its stderr line
	// if one names it, else all of stderr).
	Err string
}

// ParseOutput reads the stdout and stderr of Script(a, files) and returns one Result per file,
// in files' order.
func ParseOutput(a Algorithm, files []File, stdout, stderr string) []Result {
	res := make([]Result, len(files))
	n := a.Size() * 2
	// The line "--" starts the coreutils section; no line before it can be "--". Without big
	// files the output may be the coreutils tool's alone (Argv), which never prints that line.
	big, small := stdout, ""
	if rest, ok := strings.CutPrefix(stdout, "--\n"); ok {
		big, small = "", rest
	} else if b, rest, ok := strings.Cut(stdout, "\n--\n"); ok {
		big, small = b, rest
	} else if !slices.ContainsFunc(files, File.big) {
		big, small = "", stdout
	}
	for line := range strings.SplitSeq(big, "\n") {
		idx, rest, ok := strings.Cut(line, " ")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil || i < 0 || i >= len(files) || !files[i].big() || idx != strconv.Itoa(i) ||
			res[i].Sum != "" || res[i].Err != "" {
			continue
		}
		switch {
		case strings.HasPrefix(rest, "! "):
			res[i].Err = strings.TrimSpace(rest[2:])
		case isHex(rest, n):
			res[i].Sum = strings.ToLower(rest)
		default:
			res[i].Err = fmt.Sprintf("unexpected checksum output %q", truncate(rest, 120))
		}
	}
	sums := parseCoreutils(small, n)
	for i, f := range files {
		if f.big() {
			if res[i].Sum == "" && res[i].Err == "" {
				res[i].Err = messageFor(stderr, "")
			}
			continue
		}
		if s, ok := sums[f.Path]; ok {
			res[i].Sum = s
		} else {
			res[i].Err = messageFor(stderr, f.Path)
		}
	}
	return res
}

// parseCoreutils reads GNU `*sum` output lines "HASH  NAME" (HASH n hex digits). A line whose
// name has a backslash, newline or carriage return starts with a backslash and escapes them.
func parseCoreutils(out string, n int) map[string]string {
	sums := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		escaped := strings.HasPrefix(line, `\`)
		if escaped {
			line = line[1:]
		}
		if len(line) < n+2 || line[n:n+2] != "  " && line[n:n+2] != " *" || !isHex(line[:n], n) {
			continue
		}
		name := line[n+2:]
		if escaped {
			name = unescape(name)
		}
		sums[name] = strings.ToLower(line[:n])
	}
	return sums
}

func unescape(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n':
				sb.WriteByte('\n')
				i++
				continue
			case 'r':
				sb.WriteByte('\r')
				i++
				continue
			case '\\':
				sb.WriteByte('\\')
				i++
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// messageFor returns the stderr line that mentions p, or all of stderr, or a placeholder.
func messageFor(stderr, p string) string {
	if p != "" {
		for l := range strings.SplitSeq(stderr, "\n") {
			if strings.Contains(l, p) {
				return l
			}
		}
	}
	if s := strings.TrimSpace(stderr); s != "" {
		return s
	}
	return "no checksum output"
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
