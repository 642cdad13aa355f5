package ui_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/oidctest"
	"github.com/sshapi/sshapi/internal/service"
	"github.com/sshapi/sshapi/internal/ui"
)

// secureJar is a cookie jar that treats http://127.0.0.1 as the secure context browsers make
// of loopback, so it sends the __Host- (Secure) cookies there as a browser does.
type secureJar struct{ *cookiejar.Jar }

func asHTTPS(u *url.URL) *url.URL { c := *u; c.Scheme = "https"; return &c }

func (j secureJar) SetCookies(u *url.URL, cs []*http.Cookie) { j.Jar.SetCookies(asHTTPS(u), cs) }
func (j secureJar) Cookies(u *url.URL) []*http.Cookie        { return j.Jar.Cookies(asHTTPS(u)) }

func newBrowser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: secureJar{jar}, Timeout: 20 * time.Second}
}

// startService runs sshapi on addr with the web interface signing in at p (nil: no provider).
func startService(t testing.TB, addr string, p *oidctest.Provider) (*service.Service, string) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Addr = addr
	if p != nil {
		cfg.UI.Issuer, cfg.UI.ClientID, cfg.UI.ClientSecret = p.Issuer, p.ClientID, p.ClientSecret
	}
	svc, err := service.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(t.Context()) })
	return svc, cfg.DataDir
}

var hiddenID = regexp.MustCompile(`name="id" value="([^"]+)"`)

// signIn runs the authorization code flow as a browser would: /ui/login, the provider's login
// form, back to /ui/callback.
func signIn(t *testing.T, c *http.Client, base string, p *oidctest.Provider) {
	t.Helper()
	res, err := c.Get(base + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := hiddenID.FindSubmatch(body)
	if res.StatusCode != 200 || m == nil || !strings.HasPrefix(res.Request.URL.String(), p.Issuer+"/login/") {
		t.Fatalf("login form: %d at %s: %.300s", res.StatusCode, res.Request.URL, body)
	}
	res, err = c.PostForm(p.Issuer+"/login/username", url.Values{"id": {string(m[1])}, "username": {p.Username}, "password": {oidctest.Password}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Request.URL.String() != base+"/ui/" {
		t.Fatalf("after sign-in: %d at %s: %.300s", res.StatusCode, res.Request.URL, body)
	}
}

type sessionInfo struct {
	User      string `json:"user"`
	CSRFToken string `json:"csrf_token"`
	Provider  bool   `json:"provider"`
}

func getSession(t *testing.T, c *http.Client, base string) (sessionInfo, int) {
	t.Helper()
	res, err := c.Get(base + "/ui/session")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var si sessionInfo
	_ = json.NewDecoder(res.Body).Decode(&si)
	return si, res.StatusCode
}

func do(t testing.TB, c *http.Client, method, u, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestSignInWithProvider signs in at a real OpenID Connect provider and uses the session on
// the API: reads with the cookie work from the same origin only, state changes need the CSRF
// token too, bearer tokens still work, the state cannot be replayed, and sign-out ends the
// session on the server.
func TestSignInWithProvider(t *testing.T) {
	addr := oidctest.FreeAddr(t)
	base := "http://" + addr
	p := oidctest.Start(t, base+"/ui/callback")
	svc, dataDir := startService(t, addr, p)

	c := newBrowser(t)
	if si, code := getSession(t, c, base); code != 401 || !si.Provider {
		t.Fatalf("before sign-in: %d %+v", code, si)
	}
	signIn(t, c, base, p)
	si, code := getSession(t, c, base)
	if code != 200 || si.User != oidctest.Subject || si.CSRFToken == "" {
		t.Fatalf("session: %d %+v", code, si)
	}
	u, _ := url.Parse(base)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == ui.CookieName && strings.Contains(ck.Value, ".") {
			t.Errorf("session cookie looks like a token: %q", ck.Value)
		}
	}

	same := map[string]string{"Sec-Fetch-Site": "same-origin"}
	if code, body := do(t, c, "GET", base+"/v1/systems", "", same); code != 200 {
		t.Fatalf("list systems with the cookie: %d %s", code, body)
	}
	if code, body := do(t, c, "GET", base+"/v1/systems", "", map[string]string{"Sec-Fetch-Site": "cross-site"}); code != 403 {
		t.Fatalf("cross-site read with the cookie: %d %s", code, body)
	}
	sys := `{"id":"s1","host":"127.0.0.1","trust_on_first_use":true}`
	if code, body := do(t, c, "POST", base+"/v1/systems", sys, same); code != 403 || !strings.Contains(body, "X-CSRF-Token") {
		t.Fatalf("POST without the CSRF token: %d %s", code, body)
	}
	withToken := map[string]string{"Sec-Fetch-Site": "same-origin", ui.CSRFHeader: si.CSRFToken}
	crossWithToken := map[string]string{"Sec-Fetch-Site": "cross-site", ui.CSRFHeader: si.CSRFToken}
	if code, body := do(t, c, "POST", base+"/v1/systems", sys, crossWithToken); code != 403 {
		t.Fatalf("cross-site POST with the token: %d %s", code, body)
	}
	if code, body := do(t, c, "POST", base+"/v1/systems", sys, map[string]string{"Origin": "http://evil.example", ui.CSRFHeader: si.CSRFToken}); code != 403 {
		t.Fatalf("foreign Origin POST with the token: %d %s", code, body)
	}
	if code, body := do(t, c, "POST", base+"/v1/systems", sys, withToken); code != 201 {
		t.Fatalf("POST with the CSRF token: %d %s", code, body)
	}
	// The same principal as a bearer token for the same subject.
	sec, err := service.DevSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.IssueHS256(sec, oidctest.Subject, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, &http.Client{}, "GET", base+"/v1/systems/s1", "", map[string]string{"Authorization": "Bearer " + tok}); code != 200 {
		t.Fatalf("the cookie's system through a bearer token of the same subject: %d %s", code, body)
	}

	// The state is single-use: replaying the callback fails.
	if code, _ := do(t, c, "GET", base+"/ui/callback?state=x&code=y", "", nil); code != 400 {
		t.Fatalf("callback replay: %d", code)
	}
	// Login links are off while a provider is configured.
	if _, err := svc.UI().CreateLoginLink(t.Context(), "dev"); err == nil {
		t.Fatal("login link created with a provider configured")
	}

	// Sign-out: the cookie is refused afterwards even if a copy is replayed.
	var cookie string
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == ui.CookieName {
			cookie = ck.Name + "=" + ck.Value
		}
	}
	if code, body := do(t, c, "POST", base+"/ui/logout", "", map[string]string{"Sec-Fetch-Site": "same-origin"}); code != 403 {
		t.Fatalf("logout without the token: %d %s", code, body)
	}
	if code, body := do(t, c, "POST", base+"/ui/logout", "", withToken); code != 200 {
		t.Fatalf("logout: %d %s", code, body)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if code, body := do(t, plain, "GET", base+"/v1/systems", "", map[string]string{"Cookie": cookie}); code != 401 {
		t.Fatalf("replayed cookie after sign-out: %d %s", code, body)
	}

	// Starting sign-ins stores rows: anonymous callers share a bounded rate.
	noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	limited := 0
	for range 150 {
		if code, _ := do(t, noFollow, "GET", base+"/ui/login", "", nil); code == http.StatusTooManyRequests {
			limited++
		} else if code != http.StatusFound {
			t.Fatalf("start a sign-in: %d", code)
		}
	}
	if limited == 0 {
		t.Fatal("150 sign-ins started at once, none refused")
	}
}

// TestLoginLink checks the development login link: it works once, then never again.
func TestLoginLink(t *testing.T) {
	svc, _ := startService(t, "127.0.0.1:0", nil)
	base := "http://" + svc.Addr()
	link, err := svc.UI().CreateLoginLink(t.Context(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	c := newBrowser(t)
	if si, code := getSession(t, c, base); code != 401 || si.Provider {
		t.Fatalf("before: %d %+v", code, si)
	}
	if code, body := do(t, c, "GET", base+link, "", map[string]string{"Sec-Fetch-Site": "cross-site"}); code != 403 {
		t.Fatalf("link followed from another site: %d %s", code, body)
	}
	if code, body := do(t, c, "GET", base+link, "", map[string]string{"Sec-Fetch-Site": "none"}); code != 200 {
		t.Fatalf("link: %d %s", code, body)
	}
	if si, code := getSession(t, c, base); code != 200 || si.User != "dev" {
		t.Fatalf("after: %d %+v", code, si)
	}
	if code, _ := do(t, newBrowser(t), "GET", base+link, "", nil); code != 404 {
		t.Fatalf("second use: %d", code)
	}
	if code, _ := do(t, newBrowser(t), "GET", base+"/ui/login", "", nil); code != 404 {
		t.Fatalf("/ui/login without a provider: %d", code)
	}
}
