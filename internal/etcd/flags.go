package etcd

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Default ports.
const (
	DefaultClientPort = 2379
	DefaultPeerPort   = 2380
)

// ClusterState is etcd's --initial-cluster-state.
type ClusterState string

// Initial cluster states.
const (
	ClusterStateNew      ClusterState = "new"
	ClusterStateExisting ClusterState = "existing"
)

// deniedExtraArgs are flags the config's cluster.etcd.extraArgs may not override: they are
// what makes the member ours (identity, TLS, data location).
var deniedExtraArgs = map[string]bool{
	"name": true, "data-dir": true, "initial-cluster": true, "initial-cluster-state": true,
	"initial-advertise-peer-urls": true, "advertise-client-urls": true,
	"listen-client-urls": true, "listen-peer-urls": true,
	"cert-file": true, "key-file": true, "trusted-ca-file": true, "client-cert-auth": true,
	"peer-cert-file": true, "peer-key-file": true, "peer-trusted-ca-file": true,
	"peer-client-cert-auth": true, "force-new-cluster": true,
}

// URL helpers.

// HostPort joins an address (IPv4, IPv6 or name) and a port.
func HostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }

// ClientURL is the client URL of a member on addr.
func ClientURL(addr string, port int) string {
	if port == 0 {
		port = DefaultClientPort
	}

	return "https://" + HostPort(addr, port)
}

// PeerURL is the peer URL of a member on addr.
func PeerURL(addr string, port int) string {
	if port == 0 {
		port = DefaultPeerPort
	}

	return "https://" + HostPort(addr, port)
}

// ArgsInput is everything the etcd command line is computed from.
type ArgsInput struct {
	Binary         string
	Name           string
	Address        string
	ClientPort     int
	PeerPort       int
	ListenLoopback bool // also listen for clients on 127.0.0.1: a node with its own network namespace (not process mode)
	DataDir        string
	Certs          CertPaths
	InitialCluster string // name=peerURL,...; empty when the data folder already holds a member
	State          ClusterState
	ClusterToken   string
	ExtraArgs      map[string]string
	// Endpoints, when it has addresses, are what etcd advertises and listens on; otherwise
	// Address (and loopback for clients with ListenLoopback).
	Endpoints *Endpoints
}

// Args computes etcd's command line. Extra args are added sorted; denied ones are an error.
func Args(in ArgsInput) ([]string, error) {
	if in.ClientPort == 0 {
		in.ClientPort = DefaultClientPort
	}

	if in.PeerPort == 0 {
		in.PeerPort = DefaultPeerPort
	}

	clientURL := ClientURL(in.Address, in.ClientPort)
	peerURL := PeerURL(in.Address, in.PeerPort)
	listenPeer := peerURL

	listenClient := clientURL
	if in.ListenLoopback && in.Address != "127.0.0.1" {
		listenClient += "," + ClientURL("127.0.0.1", in.ClientPort)
	}

	if ep := in.Endpoints; ep != nil && len(ep.Advertise) > 0 {
		clientURL = strings.Join(urls(ep.Advertise, in.ClientPort, ClientURL), ",")
		peerURL = strings.Join(urls(ep.Advertise, in.PeerPort, PeerURL), ",")
		listenPeer = strings.Join(urls(ep.ListenPeer, in.PeerPort, PeerURL), ",")
		listenClient = strings.Join(urls(ep.ListenClient, in.ClientPort, ClientURL), ",")
	}

	args := []string{
		in.Binary,
		"--name=" + in.Name,
		"--data-dir=" + in.DataDir,
		"--listen-peer-urls=" + listenPeer,
		"--listen-client-urls=" + listenClient,
		"--advertise-client-urls=" + clientURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--cert-file=" + in.Certs.Path(FileServerCert),
		"--key-file=" + in.Certs.Path(FileServerKey),
		"--trusted-ca-file=" + in.Certs.Path(FileCA),
		"--client-cert-auth=true",
		"--peer-cert-file=" + in.Certs.Path(FilePeerCert),
		"--peer-key-file=" + in.Certs.Path(FilePeerKey),
		"--peer-trusted-ca-file=" + in.Certs.Path(FileCA),
		"--peer-client-cert-auth=true",
	}

	// Control planes that boot together join together: let each be a learner at once
	// (etcd's default is one learner at a time). Overridable through extraArgs.
	if _, ok := in.ExtraArgs["max-learners"]; !ok {
		args = append(args, "--max-learners=3")
	}

	if in.InitialCluster != "" {
		args = append(args,
			"--initial-cluster="+in.InitialCluster,
			"--initial-cluster-state="+string(in.State),
		)

		if in.ClusterToken != "" {
			args = append(args, "--initial-cluster-token="+in.ClusterToken)
		}
	}

	keys := make([]string, 0, len(in.ExtraArgs))
	for k := range in.ExtraArgs {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	for _, k := range keys {
		name := strings.TrimLeft(k, "-")
		if deniedExtraArgs[name] {
			return nil, fmt.Errorf("cluster.etcd.extraArgs: %q may not be overridden", name)
		}

		args = append(args, "--"+name+"="+in.ExtraArgs[k])
	}

	return args, nil
}

// hostOf returns the host of a URL or host:port string, or the string itself.
func hostOf(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return u.Hostname()
	}

	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}

	return strings.Trim(s, "[]")
}
