package etcd

import (
	"slices"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	base := ArgsInput{
		Binary: "/bin/etcd", Name: "cp-1", Address: "127.5.0.2", DataDir: "/d",
		Certs: CertPaths{Dir: "/s"},
	}

	tests := []struct {
		name    string
		mod     func(*ArgsInput)
		want    []string
		absent  []string
		wantErr string
	}{
		{
			name: "restart from data has no initial cluster",
			want: []string{
				"--name=cp-1", "--data-dir=/d",
				"--listen-peer-urls=https://127.5.0.2:2380", "--listen-client-urls=https://127.5.0.2:2379",
				"--advertise-client-urls=https://127.5.0.2:2379", "--client-cert-auth=true", "--peer-client-cert-auth=true",
				"--trusted-ca-file=/s/ca.crt", "--peer-cert-file=/s/peer.crt", "--key-file=/s/server.key",
			},
			absent: []string{"--initial-cluster", "--initial-cluster-state"},
		},
		{
			name: "bootstrap",
			mod: func(in *ArgsInput) {
				in.InitialCluster, in.State, in.ClusterToken = "cp-1=https://127.5.0.2:2380", ClusterStateNew, "tok"
			},
			want: []string{"--initial-cluster=cp-1=https://127.5.0.2:2380", "--initial-cluster-state=new", "--initial-cluster-token=tok"},
		},
		{
			name: "metal also listens on loopback",
			mod:  func(in *ArgsInput) { in.ListenLoopback = true; in.Address = "10.0.0.2" },
			want: []string{"--listen-client-urls=https://10.0.0.2:2379,https://127.0.0.1:2379"},
		},
		{
			name: "IPv6 address",
			mod:  func(in *ArgsInput) { in.Address = "fd00::2" },
			want: []string{"--listen-peer-urls=https://[fd00::2]:2380"},
		},
		{
			name: "extra args are appended sorted",
			mod: func(in *ArgsInput) {
				in.ExtraArgs = map[string]string{"quota-backend-bytes": "1000", "--auto-compaction-retention": "2"}
			},
			want: []string{"--auto-compaction-retention=2", "--quota-backend-bytes=1000"},
		},
		{
			name:    "extra args may not change identity",
			mod:     func(in *ArgsInput) { in.ExtraArgs = map[string]string{"data-dir": "/elsewhere"} },
			wantErr: "may not be overridden",
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			if tt.mod != nil {
				tt.mod(&in)
			}

			args, err := Args(in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want error %q", err, tt.wantErr)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			if args[0] != "/bin/etcd" {
				t.Fatalf("args[0] = %q", args[0])
			}

			for _, w := range tt.want {
				if !slices.Contains(args, w) {
					t.Errorf("missing %q in %v", w, args)
				}
			}

			for _, a := range args {
				for _, p := range tt.absent {
					if strings.HasPrefix(a, p+"=") {
						t.Errorf("unexpected %q", a)
					}
				}
			}

			if tt.mod != nil && len(in.ExtraArgs) == 2 {
				i, j := slices.Index(args, "--auto-compaction-retention=2"), slices.Index(args, "--quota-backend-bytes=1000")
				if i > j {
					t.Errorf("extra args not sorted: %v", args)
				}
			}
		})
	}
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{
		"https://127.0.0.1:6443": "127.0.0.1",
		"10.0.0.1:2379":          "10.0.0.1",
		"[fd00::1]":              "fd00::1",
		"cp.example.com":         "cp.example.com",
		"https://[fd00::1]:443":  "fd00::1",
	} {
		if got := hostOf(in); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", in, got, want)
		}
	}
}
