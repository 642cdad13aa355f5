package ui_test

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sshapi/sshapi/internal/oidctest"
)

// BenchmarkUIFirstScreen measures, without asserting, what issue 20 asks to report: the time
// from opening the page on a 100,000-entry directory to its first screen of rows (a full page
// load each time: HTML, modules, session, systems, one listing page), p50 and p90 of 10 loads,
// in name order and sorted by size on the server; the API's first page of that directory alone
// (p50 of 10); and the page's weight, as sent (gzip) and uncompressed. Each figure is taken
// cold (every load lists the directory afresh) and warm (kept listings served), in one run. Run
// it with
//
//	go test ./internal/ui/ -run '^$' -bench BenchmarkUIFirstScreen -benchtime 1x
func BenchmarkUIFirstScreen(b *testing.B) {
	const entries, loads = 100_000, 10
	e, _ := newUIEnv(b, map[string]string{"big/": ""})
	big := filepath.Join(e.dir, "big")
	for i := range entries {
		f, err := os.Create(filepath.Join(big, fmt.Sprintf("f%06d", i)))
		if err != nil {
			b.Fatal(err)
		}
		if i%1000 == 0 {
			_, _ = f.WriteString(strings.Repeat("x", i/1000)) // sizes for sort=size
		}
		f.Close()
	}
	ctx := e.ctx
	hash := "#/hpc/" + strings.TrimPrefix(big, "/")
	p := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	// Cold: the directory's mtime is set (to a different time in the past) before the load, so
	// no kept listing may be served and the load lists the directory afresh on the server, as
	// every load did before listings were kept. Warm: nothing changed since the cold load just
	// before, so its page is cut from the listing that load kept.
	var touches int
	touch := func() {
		touches++
		old := time.Now().Add(-time.Hour).Add(time.Duration(touches) * time.Second)
		if err := os.Chtimes(big, old, old); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		// Cold and warm loads alternate, so both meet the same machine load.
		modes := []string{"cold", "warm"}
		for _, sorted := range []bool{false, true} {
			times := map[string][]time.Duration{}
			for range loads {
				for _, mode := range modes {
					prepare := func() {
						if mode == "cold" {
							touch()
						}
					}
					step(b, ctx, "blank", chromedp.Navigate("about:blank"))
					prepare()
					start := time.Now()
					step(b, ctx, "open the big directory", chromedp.Navigate(e.base+"/ui/"+hash))
					if sorted {
						waitJS(b, ctx, "the first screen", `document.getElementById("count").textContent === "100000 entries"`)
						prepare()
						start = time.Now() // measure the sorted page alone, from the click
						click(b, ctx, "sort by size", `document.querySelector("button.sort[data-sort=size]")`)
						waitJS(b, ctx, "largest first", `document.querySelector("#viewport .row[data-index='0'] .c-name span:last-child")?.textContent === "f099000"`)
					} else {
						waitJS(b, ctx, "the first screen", rowJS("f000000")+` !== undefined && document.getElementById("count").textContent === "100000 entries"`)
					}
					times[mode] = append(times[mode], time.Since(start))
				}
			}
			name := "name"
			if sorted {
				name = "size-desc"
			}
			for _, mode := range modes {
				b.ReportMetric(p(times[mode], 0.5), mode+"-first-screen-"+name+"-p50-ms")
				b.ReportMetric(p(times[mode], 0.9), mode+"-first-screen-"+name+"-p90-ms")
				b.Logf("%s: first screen (%s order), %d loads: %v", mode, name, loads, times[mode])
			}
		}

		// The API alone: the first page of 200 in each order, and a deep page; cold and warm
		// requests alternate.
		h := e.bearer(b, oidctest.Subject)
		for _, q := range []string{"", "&sort=size&order=desc", "&sort=time", "&offset=50000"} {
			times := map[string][]time.Duration{}
			for range loads {
				for _, mode := range modes {
					if mode == "cold" {
						touch()
					}
					start := time.Now()
					if code, body := do(b, &http.Client{}, "GET", e.base+"/v1/systems/hpc/ls/"+strings.TrimPrefix(big, "/")+"?limit=200"+q, "", h); code != 200 {
						b.Fatalf("ls: %d %s", code, body)
					}
					times[mode] = append(times[mode], time.Since(start))
				}
			}
			for _, mode := range modes {
				b.Logf("%s: API page of 200 (%s): p50 %.0f ms, p90 %.0f ms", mode, strings.TrimPrefix(q, "&"), p(times[mode], 0.5), p(times[mode], 0.9))
			}
		}

		// Page weight: the HTML and every static file, as a browser gets them.
		files, err := os.ReadDir("static")
		if err != nil {
			b.Fatal(err)
		}
		urls := []string{e.base + "/ui/"}
		for _, f := range files {
			if f.Name() != "index.html" { // served as /ui/
				urls = append(urls, e.base+"/ui/static/"+f.Name())
			}
		}
		var sent, plain int64
		for _, u := range urls {
			req, _ := http.NewRequest("GET", u, nil)
			req.Header.Set("Accept-Encoding", "gzip")
			res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			sent += int64(len(body))
			if res.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(strings.NewReader(string(body)))
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, zr)
				plain += n
			} else {
				plain += int64(len(body))
			}
		}
		b.ReportMetric(float64(sent)/1024, "page-KiB-sent")
		b.ReportMetric(float64(plain)/1024, "page-KiB-uncompressed")
		b.Logf("page weight: %d files, %d bytes sent (gzip where accepted), %d bytes uncompressed", len(urls), sent, plain)
	}
}
