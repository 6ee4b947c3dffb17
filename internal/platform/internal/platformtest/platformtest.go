// Package platformtest is what the tests of the cloud platforms share: an Env whose Do is one
// real HTTP request (404 is platform.ErrNotFound and 400 platform.ErrBadRequest, as the boot's), and the recorded documents of
// a metadata service (a JSON object of paths and bodies) they serve from an httptest server.
package platformtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/talos-go/talos/internal/platform"
)

// Env is an Env for a metadata service: NetworkUp counts its calls, Log collects the lines.
type Env struct {
	mu      sync.Mutex
	Logs    []string
	Ups     int
	Request []platform.Request // every request Do made, in order
}

// Platform is the platform.Env.
func (e *Env) Platform() platform.Env {
	return platform.Env{
		Cmdline:   func(string) string { return "" },
		NetworkUp: func() error { e.mu.Lock(); e.Ups++; e.mu.Unlock(); return nil },
		Do:        e.do,
		Get: func(ctx context.Context, url string) ([]byte, error) {
			return e.do(ctx, platform.Request{URL: url})
		},
		Log: func(format string, args ...any) {
			e.mu.Lock()
			e.Logs = append(e.Logs, fmt.Sprintf(format, args...))
			e.mu.Unlock()
		},
	}
}

// Logged is the console's lines.
func (e *Env) Logged() string {
	e.mu.Lock()
	defer e.mu.Unlock()

	return strings.Join(e.Logs, "\n")
}

func (e *Env) do(ctx context.Context, r platform.Request) ([]byte, error) {
	e.mu.Lock()
	e.Request = append(e.Request, r)
	e.mu.Unlock()

	method := r.Method
	if method == "" {
		method = http.MethodGet
	}

	req, err := http.NewRequestWithContext(ctx, method, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}

	req.Header = r.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}

	switch resp.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusNotFound:
		return nil, fmt.Errorf("%s %s: %s: %w", method, r.URL, resp.Status, platform.ErrNotFound)
	case http.StatusBadRequest:
		return nil, fmt.Errorf("%s %s: %s: %w", method, r.URL, resp.Status, platform.ErrBadRequest)
	default:
		return nil, fmt.Errorf("%s %s: %s", method, r.URL, resp.Status)
	}
}

// Documents reads a recorded metadata service: a JSON object of paths and bodies; a body that
// is a JSON string is served as its text, any other JSON value as itself.
func Documents(t testing.TB, file string) map[string][]byte {
	t.Helper()

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	var raw map[string]json.RawMessage
	if err = json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s: %v", file, err)
	}

	docs := make(map[string][]byte, len(raw))

	for path, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			docs[path] = []byte(s)
		} else {
			docs[path] = v
		}
	}

	return docs
}
