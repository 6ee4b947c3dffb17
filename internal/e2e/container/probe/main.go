// Command probe is the container end-to-end suite's workload, a static binary the suite puts
// on the nodes and runs in pods (no image is pulled): `probe serve ADDR` answers every HTTP
// request with "probe <hostname>" and logs it, `probe get URL` prints a URL's body, `probe
// resolve NAME` prints the addresses the pod's resolver gives for a name, `probe mkdir DIR`
// makes a folder or fails with the error, `probe sleep` waits forever (a pod to exec into).
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: probe serve ADDR | get URL | resolve NAME | mkdir DIR | sleep")
	}

	switch os.Args[1] {
	case "serve":
		host, _ := os.Hostname() // an empty name still answers
		srv := &http.Server{Addr: os.Args[2], ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			log.Printf("request %s %s from %s", r.Method, r.URL.Path, r.RemoteAddr) //nolint:gosec // the test reads this log
			fmt.Fprintf(w, "probe %s\n", host)
		})}
		log.Printf("serving on %s", os.Args[2]) //nolint:gosec // the test names the address
		log.Fatal(srv.ListenAndServe())
	case "get":
		c := &http.Client{Timeout: 10 * time.Second}

		resp, err := c.Get(os.Args[2]) //nolint:gosec // fetching the URL it is given is its job
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()

		if _, err = io.Copy(os.Stdout, resp.Body); err != nil {
			log.Fatal(err)
		}
	case "resolve":
		addrs, err := net.LookupHost(os.Args[2]) //nolint:gosec // resolving the name it is given is its job
		if err != nil {
			log.Fatal(err)
		}

		fmt.Println(strings.Join(addrs, " "))
	case "mkdir":
		// The seccomp test's workload: the error (EPERM under a profile that denies mkdir)
		// goes to the log and the exit code.
		if err := os.Mkdir(os.Args[2], 0o755); err != nil {
			log.Fatal(err)
		}

		fmt.Println("mkdir ok")
	case "sleep":
		for { // not select{}: with no other goroutine the runtime calls that a deadlock
			time.Sleep(time.Hour)
		}
	default:
		log.Fatalf("unknown command %q", os.Args[1]) //nolint:gosec // quoted
	}
}
