package testenv

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// bootstrapToken is a kubeadm-style token, "<id>.<secret>", as cluster.token holds it.
var bootstrapToken = regexp.MustCompile(`^[a-z0-9]{6}\.([a-z0-9]{16})$`)

// AddSecretValues adds to out, named by source and path, the secret strings of YAML documents
// (machine configs, kubeconfigs, or resources as `talosctl get -o yaml` prints them): values
// of fields named token, privateKey, *secret or *encryptionKey (the secret part of a bootstrap
// token too), every private key as the document holds it (PEM, or base64 of the PEM) and each
// base64 body line of its PEM. Short values are not secrets (a worker's empty CA key); tokens
// are also added base64-encoded, as a Kubernetes Secret's data holds them. PEM private keys
// in the data as text (a key file) count too. It returns how many values it added.
func AddSecretValues(out map[string]string, source string, data []byte) int {
	before := len(out)

	for i, rest := 0, data; ; i++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}

		if strings.Contains(b.Type, "PRIVATE KEY") {
			addPEMLines(out, fmt.Sprintf("%s (PEM block %d)", source, i), pem.EncodeToMemory(b))
		}
	}

	var walk func(path string, n any)
	walk = func(path string, n any) {
		switch v := n.(type) {
		case map[string]any:
			for k, c := range v {
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		case string:
			if path != "" { // a document that is one string: a PEM file, done above
				addSecret(out, source+" "+path, path[strings.LastIndex(path, ".")+1:], v)
			}
		}
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))

	for {
		var doc any
		if err := dec.Decode(&doc); err != nil {
			break // the end, or a document that is not YAML: the walk stops there
		}

		walk("", doc)
	}

	return len(out) - before
}

func addSecret(out map[string]string, name, field, v string) {
	if len(v) < 16 {
		return
	}

	pemData := []byte(v)
	if decoded, err := base64.StdEncoding.DecodeString(v); err == nil {
		pemData = decoded
	}

	if bytes.Contains(pemData, []byte("PRIVATE KEY")) {
		out[name] = v
		addPEMLines(out, name, pemData)

		return
	}

	f := strings.ToLower(field)
	if f != "token" && f != "privatekey" && !strings.HasSuffix(f, "secret") && !strings.HasSuffix(f, "encryptionkey") {
		return
	}

	out[name] = v
	out[name+" (base64)"] = base64.StdEncoding.EncodeToString([]byte(v))

	if m := bootstrapToken.FindStringSubmatch(v); m != nil {
		out[name+" (secret part)"] = m[1]
		out[name+" (secret part, base64)"] = base64.StdEncoding.EncodeToString([]byte(m[1]))
	}
}

// addPEMLines adds the base64 body lines of a PEM private key: a log or a YAML block scalar may
// hold it wrapped differently, never with other bytes inside a line.
func addPEMLines(out map[string]string, name string, pemData []byte) {
	for i, line := range strings.Split(string(pemData), "\n") {
		if len(line) >= 40 && !strings.HasPrefix(line, "-----") {
			out[fmt.Sprintf("%s (PEM line %d)", name, i)] = line
		}
	}
}

// FoundSecrets names the secrets of secrets that data holds, one name per distinct value (the
// first, with how many other names the value has), and says so when data holds any PEM
// private key at all; sorted.
func FoundSecrets(data []byte, secrets map[string]string) []string {
	names := map[string][]string{}

	for name, v := range secrets {
		if bytes.Contains(data, []byte(v)) {
			names[v] = append(names[v], name)
		}
	}

	var found []string

	if bytes.Contains(data, []byte("PRIVATE KEY-----")) {
		found = append(found, "a PEM private key")
	}

	for _, n := range names {
		sort.Strings(n)

		if len(n) == 1 {
			found = append(found, n[0])
		} else {
			found = append(found, fmt.Sprintf("%s (and %d other names)", n[0], len(n)-1))
		}
	}

	sort.Strings(found)

	return found
}
