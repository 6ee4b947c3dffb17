package registry

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// Main is `machined registry --cert F --key F --users F --blobs DIR`: a cluster's registry
// (talosctl cluster create --with-registry), serving the listener it gets as fd 3 (made by
// talosctl, so a port in use is refused at once) until SIGTERM. The users file is JSON, user
// name to password.
func Main(args []string) error {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	certFile := fs.String("cert", "", "the server certificate (PEM)")
	keyFile := fs.String("key", "", "its key (PEM)")
	usersFile := fs.String("users", "", "JSON file of user names to passwords (none: anonymous)")
	blobs := fs.String("blobs", "", "folder for the blobs (none: memory)")
	fs.String("cluster", "", "the cluster's folder (names the process for `cluster destroy`)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	opts := Options{BlobDir: *blobs, Log: os.Stderr}

	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("--cert, --key: %w", err)
		}

		opts.Cert = &cert
	}

	if *usersFile != "" {
		data, err := os.ReadFile(*usersFile)
		if err != nil {
			return err
		}

		if err = json.Unmarshal(data, &opts.Users); err != nil {
			return fmt.Errorf("--users %s: %w", *usersFile, err)
		}
	}

	ln, err := net.FileListener(os.NewFile(3, "registry listener"))
	if err != nil {
		return fmt.Errorf("the registry's listener (fd 3): %w", err)
	}

	opts.Listener = ln

	r, err := Start(opts)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	go func() {
		<-ctx.Done()
		r.Close() // Wait reports how serving ended
	}()

	fmt.Fprintf(os.Stderr, "registry: serving %s\n", r.URL)

	return r.Wait()
}
