package bench

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSSHStderrKind(t *testing.T) {
	for msg, want := range map[string]string{
		"kex_exchange_identification: read: Connection reset by peer":                      "ssh: dropped before auth (MaxStartups)",
		"Connection closed by 127.0.0.1 port 2222":                                         "ssh: dropped before auth (MaxStartups)",
		"ssh: connect to host 127.0.0.1 port 1: Connection refused":                        "transport: connection refused",
		"mux_client_request_session: session request failed: Session open refused by peer": "ssh: session refused (MaxSessions)",
		"channel 0: open failed: connect failed: open failed":                              "ssh: session refused (MaxSessions)",
		"user@127.0.0.1: Permission denied (publickey).":                                   "ssh: authentication failed",
		"Host key verification failed.":                                                    "ssh: host key",
		"ssh: connect to host 10.0.0.1 port 22: Connection timed out":                      "timeout",
		"weird": "ssh: exit 255",
	} {
		if got := sshStderrKind(msg); got != want {
			t.Errorf("sshStderrKind(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestAPIOps(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(401)
			return
		}
		switch r.URL.Path {
		case "/sshapi/v2/ok", "/v1/systems/ok/credential/check":
			_, _ = w.Write([]byte(`{"exit_status":0,"ok":true}`))
		case "/sshapi/v2/exit3":
			_, _ = w.Write([]byte(`{"exit_status":3}`))
		case "/sshapi/v2/signal":
			_, _ = w.Write([]byte(`{"exit_status":null,"signal":"KILL"}`))
		case "/v1/systems/auth/credential/check":
			_, _ = w.Write([]byte(`{"ok":false,"error":"ssh authentication failed: no"}`))
		default:
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	api := &API{BaseURL: srv.URL, Token: "tok"}
	bad := &API{BaseURL: srv.URL, Token: "nope"}
	for _, tc := range []struct {
		name string
		op   Op
		want string
	}{
		{"command ok", api.CommandOp("ok", "true"), ""},
		{"non-zero exit", api.CommandOp("exit3", "exit 3"), "exit 3"},
		{"killed by signal", api.CommandOp("signal", "sleep 9"), "exit -1"},
		{"server overloaded", api.CommandOp("busy", "true"), "http 503"},
		{"bad token", bad.CommandOp("ok", "true"), "http 401"},
		{"check ok", api.CheckOp("ok"), ""},
		{"check auth failure", api.CheckOp("auth"), "ssh: authentication failed"},
	} {
		if got := Classify(tc.op(t.Context())); got != tc.want {
			t.Errorf("%s: kind %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A fake peer speaking the line protocol (sh instead of Python): fails commands containing
// "fail", answers everything else.
const fakePeer = `echo '{"ready":true,"versions":{"fake":"1"}}'
while read -r line; do
  id=$(echo "$line" | sed 's/.*"id":\([0-9]*\).*/\1/')
  case "$line" in
    *fail*) echo "{\"id\":$id,\"ok\":false,\"kind\":\"exit 3\",\"error\":\"failed\"}" ;;
    *) echo "{\"id\":$id,\"ok\":true}" ;;
  esac
done
`

func TestPyPeerProtocol(t *testing.T) {
	script := filepath.Join(t.TempDir(), "peer.sh")
	if err := os.WriteFile(script, []byte(fakePeer), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &PyPeer{Python: "/bin/sh", Script: script, Endpoint: SSHEndpoint{Host: "h", Port: 1, User: "u", KeyFile: "k", KnownHostsFile: "kh", HostKey: "ssh-ed25519 AAAA"}}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p.Versions()["fake"] != "1" {
		t.Errorf("versions %v", p.Versions())
	}
	rec, err := Run(t.Context(), Plan{Rate: 200, Duration: 100 * time.Millisecond, Timeout: 5 * time.Second}, p.Op("uptime"))
	if err != nil {
		t.Fatal(err)
	}
	if s := rec.Summary(); s.OK != 20 || s.Failed != 0 {
		t.Fatalf("peer run %+v", s)
	}
	if got := Classify(p.Op("fail")(t.Context())); got != "exit 3" {
		t.Errorf("failing command: kind %q", got)
	}
	if err := p.ConnectOp()(t.Context()); err != nil {
		t.Errorf("connect: %v", err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestReportTablesAndPlots(t *testing.T) {
	run := func(target string, rate, p50, p99 float64, failed int) Summary {
		return Summary{Target: target, Scenario: ScenarioCommands, Command: "uptime", Rate: rate, Scheduled: 100, OK: 100 - failed, Failed: failed,
			AchievedRate: rate, Latency: Stats{Min: p50 / 2, Mean: p50, P50: p50, P90: p99 / 2, P99: p99, P999: p99, Max: p99},
			Curve: []Point{{Percentile: 0, Ms: p50 / 2}, {Percentile: 50, Ms: p50}, {Percentile: 99, Ms: p99}, {Percentile: 100, Ms: p99}}, Errors: map[string]int{}}
	}
	failing := run("openssh", 50, 400, 900, 30)
	failing.Errors["ssh: dropped before auth (MaxStartups)"] = 30
	rep := &Report{Runs: []Summary{
		run("asyncssh", 50, 10, 40, 0), failing, run(BaselineTarget, 50, 5, 20, 0),
		run(BaselineTarget, 500, 8, 50, 0), run("asyncssh", 500, 30, 300, 0),
		{Target: BaselineTarget, Scenario: ScenarioBurst, Command: "uptime", Scheduled: 500, OK: 500, WallS: 2, Errors: map[string]int{}},
		{Target: "openssh", Scenario: ScenarioBurst, Command: "uptime", Scheduled: 500, OK: 100, Failed: 400, WallS: 8, Errors: map[string]int{"ssh: dropped before auth (MaxStartups)": 400}},
	}}
	if got := rep.Targets(); strings.Join(got, ",") != "sshapi,asyncssh,openssh" {
		t.Errorf("targets %v: sshapi must come first", got)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	var head bytes.Buffer
	if err := rep.WriteHeadline(&head); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 50 | asyncssh | 50.0 | 10.0 | 20.0 | 40.0 | 40.0 | 40.0 | 0/100 | – | 2.00× | 2.00× |", // ratios to sshapi
		"ssh: dropped before auth (MaxStartups): 30",
		"| openssh | 500 | 100 | 400 | 8.00 |", "4.00× |", // burst time ratio
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	// The best peer at 50/s is asyncssh (no failures), not openssh; p99 ratio 40/20.
	if want := "| 50 | 50.0 | 5.00 | 20.0 | 0/100 | asyncssh | 50.0 | 10.0 | 40.0 | 0/100 | 2.00× |"; !strings.Contains(head.String(), want) {
		t.Errorf("headline lacks %q:\n%s", want, head.String())
	}
	dir := t.TempDir()
	names, err := WritePlots(rep, dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "fig1-uptime.png,fig2-mean-latency.png" {
		t.Fatalf("plots %v", names)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG (%v)", n, err)
		}
	}
	// JSON round trip keeps everything the tables need.
	path := filepath.Join(dir, "r.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil || len(back.Runs) != len(rep.Runs) || back.Runs[1].Errors["ssh: dropped before auth (MaxStartups)"] != 30 {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

func TestParsePeersAndSlug(t *testing.T) {
	for in, want := range map[string]string{"": "", "none": "", "all": "openssh,openssh-mux,asyncssh,paramiko", "paramiko, openssh,paramiko": "paramiko,openssh"} {
		got, err := ParsePeers(in)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("ParsePeers(%q) = %v, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParsePeers("libssh"); err == nil {
		t.Error("unknown peer accepted")
	}
	for in, want := range map[string]string{"uptime": "uptime", "ls bench-ls-10000": "ls-bench-ls-10000", "ls /tmp/x y": "ls-tmp-x-y", "$$$": "command"} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}
