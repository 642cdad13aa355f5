package soak

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sample is one reading of an instance's process: from /proc (RSS, threads, open files) and
// from its /metrics (goroutines; -1 when it did not answer).
type Sample struct {
	T          float64 `json:"t_s"`
	Instance   string  `json:"instance"`
	PID        int     `json:"pid"`
	RSSBytes   int64   `json:"rss_bytes"`
	Threads    int     `json:"threads"`
	OpenFiles  int     `json:"open_files"`
	Goroutines int     `json:"goroutines"`
}

// DBSample is one reading of the primary's connections to the soak's database (every instance
// together; -1 when the primary did not answer).
type DBSample struct {
	T           float64 `json:"t_s"`
	Connections int     `json:"connections"`
}

// sample reads every instance and the database every 2 s until ctx ends.
func (r *run) sample(ctx context.Context) {
	start := r.loadStart
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		ts := math.Round(time.Since(start).Seconds()*10) / 10
		for _, in := range r.ins {
			if pid := in.pid(); pid != 0 {
				rss, th := procStat(pid)
				s := Sample{T: ts, Instance: in.name, PID: pid, RSSBytes: rss, Threads: th,
					OpenFiles: openFiles(pid), Goroutines: goroutines(ctx, in.addr)}
				r.mu.Lock()
				r.samples = append(r.samples, s)
				r.mu.Unlock()
			}
		}
		db := DBSample{T: ts, Connections: dbConnections(ctx, r.primary())}
		r.mu.Lock()
		r.dbSamples = append(r.dbSamples, db)
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// openFiles counts a process's open file descriptors (/proc/PID/fd).
func openFiles(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// goroutines reads go_goroutines from an instance's /metrics; -1 if it cannot.
func goroutines(ctx context.Context, addr string) int {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second) // the last reading is at the end
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return -1
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return int(f)
		}
	}
	return -1
}

// dbConnections counts the connections to the soak's database on the primary (pg_stat_activity);
// -1 if it cannot.
func dbConnections(ctx context.Context, pg interface{ URL(string) string }) int {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second) // the last reading is at the end
	defer cancel()
	conn, err := pgx.Connect(cctx, pg.URL("postgres"))
	if err != nil {
		return -1
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	if err := conn.QueryRow(cctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'soak'").Scan(&n); err != nil {
		return -1
	}
	return n
}
