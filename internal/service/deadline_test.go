package service

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

const (
	testReadIdle  = 100 * time.Millisecond
	testWriteIdle = 100 * time.Millisecond
)

// deadlineServer serves h behind ioDeadlines on loopback; each handler reports its outcome on
// the returned channel.
func deadlineServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request) error) (*httptest.Server, <-chan error) {
	t.Helper()
	done := make(chan error, 4)
	srv := httptest.NewServer(ioDeadlines(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done <- h(w, r)
	}), testReadIdle, testWriteIdle))
	t.Cleanup(srv.Close)
	return srv, done
}

func awaitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("handler did not finish")
		return nil
	}
}

// TestIODeadlines: the server drops a client that stops reading a response or stops sending a
// body, within the idle bounds, while a slow handler and a long stream that keeps moving are
// never cut (unlike http.Server's whole-request WriteTimeout and ReadTimeout).
func TestIODeadlines(t *testing.T) {
	t.Run("client stops reading a stream", func(t *testing.T) {
		srv, done := deadlineServer(t, func(w http.ResponseWriter, r *http.Request) error {
			chunk := bytes.Repeat([]byte("x"), 1<<20)
			for range 1 << 10 { // 1 GiB: far more than the socket buffers hold
				if _, err := w.Write(chunk); err != nil {
					return err
				}
			}
			return nil
		})
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
		if err := awaitResult(t, done); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("handler's write ended with %v, want a deadline error", err)
		}
	})

	t.Run("slow handler and pauses between chunks", func(t *testing.T) {
		srv, done := deadlineServer(t, func(w http.ResponseWriter, r *http.Request) error {
			for i := range 3 {
				time.Sleep(3 * testWriteIdle) // working (a command running) longer than the bound
				if _, err := fmt.Fprintf(w, "chunk %d\n", i); err != nil {
					return err
				}
				if err := http.NewResponseController(w).Flush(); err != nil {
					return err
				}
			}
			return nil
		})
		res, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(body) != "chunk 0\nchunk 1\nchunk 2\n" {
			t.Fatalf("body %q, %v", body, err)
		}
		if err := awaitResult(t, done); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("client stops sending the body", func(t *testing.T) {
		srv, done := deadlineServer(t, func(w http.ResponseWriter, r *http.Request) error {
			_, err := io.Copy(io.Discard, r.Body)
			return err
		})
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nsome of it")
		if err := awaitResult(t, done); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("handler's read ended with %v, want a deadline error", err)
		}
	})

	t.Run("request context survives a long handler after the body", func(t *testing.T) {
		srv, done := deadlineServer(t, func(w http.ResponseWriter, r *http.Request) error {
			if _, err := io.ReadAll(r.Body); err != nil {
				return err
			}
			select {
			case <-r.Context().Done():
				return fmt.Errorf("request context ended while the client waited: %w", context.Cause(r.Context()))
			case <-time.After(3 * testReadIdle):
			}
			_, err := io.WriteString(w, "done")
			return err
		})
		res, err := http.Post(srv.URL, "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if err := awaitResult(t, done); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("handler's own write deadline takes over", func(t *testing.T) {
		srv, done := deadlineServer(t, func(w http.ResponseWriter, r *http.Request) error {
			rc := http.NewResponseController(w)
			if err := rc.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
				return err
			}
			if _, err := w.Write(bytes.Repeat([]byte("x"), 64<<10)); err != nil {
				return err
			}
			return rc.Flush() // would succeed if the layer re-armed its own deadline
		})
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		go io.Copy(io.Discard, bufio.NewReader(conn))
		if err := awaitResult(t, done); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("handler's flush ended with %v, want its own (past) deadline to apply", err)
		}
	})
}
