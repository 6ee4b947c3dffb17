// Package portforward publishes a container node's ports on the host, as upstream's docker
// provisioner does with --exposed-ports: a process per cluster relays TCP connections and UDP
// datagrams arriving at host addresses to the node. Its listeners are made by `cluster create`
// (a port in use is refused there) and handed over as files.
package portforward

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Rule is one published port.
type Rule struct {
	Proto  string         `json:"proto"` // tcp or udp
	Listen netip.AddrPort `json:"listen"`
	To     netip.AddrPort `json:"to"`
}

func (r Rule) String() string { return fmt.Sprintf("%s %s -> %s", r.Proto, r.Listen, r.To) }

// Parse reads upstream's -p list, "<hostPort>:<nodePort>[/tcp|/udp]" separated by commas, into
// rules listening on hostIP and relaying to node.
func Parse(list string, hostIP string, node netip.Addr) ([]Rule, error) {
	host, err := netip.ParseAddr(hostIP)
	if err != nil {
		return nil, fmt.Errorf("--docker-host-ip %q is not an IP address: give one like 0.0.0.0 or 127.0.0.1", hostIP)
	}

	var rules []Rule

	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}

		ports, proto, _ := strings.Cut(item, "/")
		if proto == "" {
			proto = "tcp"
		}

		hostPort, nodePort, ok := strings.Cut(ports, ":")
		hp, err1 := strconv.ParseUint(hostPort, 10, 16)
		np, err2 := strconv.ParseUint(nodePort, 10, 16)

		switch {
		case proto != "tcp" && proto != "udp":
			return nil, fmt.Errorf("--exposed-ports %q: the protocol %q is not tcp or udp", item, proto)
		case !ok || err1 != nil || err2 != nil || hp == 0 || np == 0:
			return nil, fmt.Errorf("--exposed-ports %q: give <hostPort>:<nodePort>/<tcp|udp>, e.g. 8080:80/tcp", item)
		}

		rules = append(rules, Rule{Proto: proto, Listen: netip.AddrPortFrom(host, uint16(hp)), To: netip.AddrPortFrom(node, uint16(np))})
	}

	return rules, nil
}

// Listen makes the rules' listeners and returns them as files, in the rules' order, for the
// forwarding process.
func Listen(rules []Rule) ([]*os.File, error) {
	var files []*os.File

	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}

		return nil, err
	}

	for _, r := range rules {
		var (
			f   *os.File
			err error
		)

		switch r.Proto {
		case "tcp":
			var l *net.TCPListener
			if l, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(r.Listen)); err == nil {
				f, err = l.File()
				l.Close()
			}
		default:
			var c *net.UDPConn
			if c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(r.Listen)); err == nil {
				f, err = c.File()
				c.Close()
			}
		}

		if err != nil {
			return fail(fmt.Errorf("--exposed-ports: %s: %w (choose another host port)", r.Listen, err))
		}

		files = append(files, f)
	}

	return files, nil
}

// Main is `machined port-forward --rules JSON`: the listeners are fds 3, 4, ... in the rules'
// order. It relays until SIGTERM.
func Main(args []string) error {
	fs := flag.NewFlagSet("port-forward", flag.ContinueOnError)
	rulesJSON := fs.String("rules", "", "the published ports, as JSON (written by talosctl cluster create)")
	fs.String("cluster", "", "the cluster's folder (names the process for `cluster destroy`)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	var rules []Rule
	if err := json.Unmarshal([]byte(*rulesJSON), &rules); err != nil {
		return fmt.Errorf("--rules: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var wg sync.WaitGroup

	for i, r := range rules {
		f := os.NewFile(uintptr(3+i), r.String())

		var err error

		switch r.Proto {
		case "tcp":
			var l net.Listener
			if l, err = net.FileListener(f); err == nil {
				wg.Go(func() { serveTCP(ctx, l, r.To) })
			}
		default:
			var c net.PacketConn
			if c, err = net.FilePacketConn(f); err == nil {
				udp, ok := c.(*net.UDPConn)
				if !ok {
					return fmt.Errorf("%s: the listener is not UDP", r)
				}

				wg.Go(func() { serveUDP(ctx, udp, r.To) })
			}
		}

		f.Close()

		if err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}

		log.Printf("publishing %s", r)
	}

	wg.Wait()

	return nil
}

// serveTCP relays each connection to to until ctx ends.
func serveTCP(ctx context.Context, l net.Listener, to netip.AddrPort) {
	go func() {
		<-ctx.Done()
		l.Close()
	}()

	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}

			log.Printf("accepting on %s: %v", l.Addr(), err)
			time.Sleep(100 * time.Millisecond)

			continue
		}

		go relayTCP(conn, to)
	}
}

func relayTCP(in net.Conn, to netip.AddrPort) {
	defer in.Close()

	out, err := net.DialTimeout("tcp", to.String(), 10*time.Second)
	if err != nil {
		log.Printf("%s: %v", to, err)

		return
	}
	defer out.Close()

	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		io.Copy(dst, src) //nolint:errcheck // either side closing ends the relay
		if c, ok := dst.(*net.TCPConn); ok {
			_ = c.CloseWrite()
		}

		done <- struct{}{}
	}

	go copyHalf(out, in)
	go copyHalf(in, out)

	<-done
	<-done
}

// udpIdle is how long a UDP client's relay lives without a datagram either way.
const udpIdle = 2 * time.Minute

// serveUDP relays datagrams to to, each client through a socket of its own (so the node's
// answers find their way back), until ctx ends.
func serveUDP(ctx context.Context, l *net.UDPConn, to netip.AddrPort) {
	go func() {
		<-ctx.Done()
		l.Close()
	}()

	var (
		mu      sync.Mutex
		clients = map[netip.AddrPort]*net.UDPConn{}
	)

	buf := make([]byte, 64<<10)

	for {
		n, from, err := l.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}

			continue
		}

		mu.Lock()
		out := clients[from]

		if out == nil {
			if out, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to)); err != nil {
				mu.Unlock()
				log.Printf("%s: %v", to, err)

				continue
			}

			clients[from] = out

			go func() {
				defer func() {
					mu.Lock()
					delete(clients, from)
					mu.Unlock()
					out.Close()
				}()

				reply := make([]byte, 64<<10)

				for {
					_ = out.SetReadDeadline(time.Now().Add(udpIdle))

					n, err := out.Read(reply)
					if err != nil {
						return
					}

					l.WriteToUDPAddrPort(reply[:n], from) //nolint:errcheck // datagrams may be lost
				}
			}()
		}
		mu.Unlock()

		out.Write(buf[:n]) //nolint:errcheck // datagrams may be lost
	}
}
