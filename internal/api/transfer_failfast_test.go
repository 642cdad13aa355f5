package api

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTransferFailsFastOnPermanentDialErrors: a system the client can never reach (no cipher in
// common with its sshd) fails the transfer at once with the reason, instead of retrying until
// the transfer's deadline.
func TestTransferFailsFastOnPermanentDialErrors(t *testing.T) {
	e, _ := newTransferEnv(t)
	e.register("alice", "good")
	r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "nocipher", "host": e.srv.Host, "port": e.srv.Port,
		"host_keys": []string{e.srv.AuthorizedHostKey()}, "ciphers": []string{"3des-cbc"}})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PUT", "/v1/systems/nocipher/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)}); r.status != 200 {
		t.Fatalf("credential: %d %s", r.status, r.body)
	}
	r = e.do("alice", "POST", "/v1/transfers", map[string]any{
		"source":      map[string]any{"system": "nocipher", "path": "/etc/hostname"},
		"destination": map[string]any{"system": "good", "path": e.srv.MkTemp(t) + "/h"}})
	if r.status != 201 && r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := fmt.Sprint(r.json(t)["id"])
	m := e.waitTransfer("alice", id, 60*time.Second)
	if m["status"] != "failed" || !strings.Contains(fmt.Sprint(m["error"]), "algorithm") {
		t.Fatalf("transfer from a system with no common cipher: %v", m)
	}
	if a, _ := m["attempts"].(float64); a > 1 {
		t.Fatalf("a permanent dial error was retried: %v attempts", a)
	}
}

// TestTransferHomeRelativePaths: "~/x" in a transfer endpoint is the home directory's x, as in
// every other JSON body (it used to become a directory literally named "~").
func TestTransferHomeRelativePaths(t *testing.T) {
	e, _ := newTransferEnv(t)
	e.register("alice", "a")
	e.register("alice", "b")
	dir := e.srv.MkTemp(t)
	rel := strings.TrimPrefix(dir, e.srv.Home+"/")
	if r := e.do("alice", "PUT", "/v1/systems/a/content/~/"+rel+"/src.txt", "home relative\n"); r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r := e.do("alice", "POST", "/v1/transfers", map[string]any{
		"source":      map[string]any{"system": "a", "path": "~/" + rel + "/src.txt"},
		"destination": map[string]any{"system": "b", "path": "~/" + rel + "/dst.txt"}})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	m := e.waitTransfer("alice", fmt.Sprint(r.json(t)["id"]), 60*time.Second)
	if m["status"] != "succeeded" {
		t.Fatalf("transfer with ~/ paths: %v", m)
	}
	if got := e.do("alice", "GET", "/v1/systems/b/content"+dir+"/dst.txt", nil); got.status != 200 || string(got.body) != "home relative\n" {
		t.Fatalf("destination: %d %q", got.status, got.body)
	}
}
