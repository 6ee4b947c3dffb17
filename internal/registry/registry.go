// Package registry runs a real OCI distribution registry (go-containerregistry's pkg/registry)
// behind TLS and HTTP basic auth, for tests and for `talosctl cluster create --with-registry`,
// and pushes images to it. Nothing here reaches beyond the address it is given.
package registry

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
)

// Options say where the registry listens, how it is reached and who may use it.
type Options struct {
	// Addr is host:port to listen on (port 0: any free one). Ignored with Listener.
	Addr string
	// Listener, when set, is served instead of listening on Addr (one handed over by a parent
	// that made it, so a port in use was refused at once).
	Listener net.Listener
	// Cert is the server's certificate; nil: plain HTTP.
	Cert *tls.Certificate
	// Users are the accepted user names and passwords; none: anyone may pull and push.
	Users map[string]string
	// BlobDir keeps blobs on disk; empty: in memory (manifests are always in memory).
	BlobDir string
	// Log receives the registry's request log; nil: discarded.
	Log io.Writer
}

// Registry is a running registry.
type Registry struct {
	// URL is its base, e.g. https://10.5.0.1:5000; Host is its host:port, as image references
	// and machine.registries.config keys name it.
	URL, Host string

	srv  *http.Server
	done chan error
}

// Start listens and serves until Close.
func Start(opts Options) (*Registry, error) {
	ln := opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", opts.Addr); err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
	}

	logOut := opts.Log
	if logOut == nil {
		logOut = io.Discard
	}

	regOpts := []ggcr.Option{ggcr.Logger(log.New(logOut, "registry: ", log.LstdFlags))}
	if opts.BlobDir != "" {
		regOpts = append(regOpts, ggcr.WithBlobHandler(ggcr.NewDiskBlobHandler(opts.BlobDir)))
	}

	scheme := "http"
	if opts.Cert != nil {
		scheme = "https"
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*opts.Cert}, MinVersion: tls.VersionTLS12})
	}

	r := &Registry{
		URL:  scheme + "://" + ln.Addr().String(),
		Host: ln.Addr().String(),
		srv:  &http.Server{Handler: basicAuth(opts.Users, ggcr.New(regOpts...)), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(logOut, "registry: ", 0)},
		done: make(chan error, 1),
	}

	go func() { r.done <- r.srv.Serve(ln) }()

	return r, nil
}

// Wait returns when the registry stops serving: with nil after Close.
func (r *Registry) Wait() error {
	err := <-r.done
	r.done <- err

	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}

	return err
}

// Close stops the registry, giving requests in flight a few seconds.
func (r *Registry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if err := r.srv.Shutdown(ctx); err != nil {
		return r.srv.Close()
	}

	return nil
}

// basicAuth refuses a request without a known user's password, as a registry with basic auth
// does: 401 with a Basic challenge (so clients like containerd send their credentials) and
// the distribution spec's error body, whose message containerd passes on to the kubelet.
func basicAuth(users map[string]string, next http.Handler) http.Handler {
	if len(users) == 0 {
		return next
	}

	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, ok := req.BasicAuth()

		msg := "authentication required: give a user name and password"
		if ok {
			want, known := users[user]
			if known && subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1 {
				next.ServeHTTP(w, req)

				return
			}

			msg = fmt.Sprintf("invalid username or password (user %q)", user)
		}

		body, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": "UNAUTHORIZED", "message": msg}}}) // plain strings always encode

		w.Header().Set("WWW-Authenticate", `Basic realm="talos-go registry"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write(body) //nolint:errcheck // the client went away; nothing to do
	})
}
