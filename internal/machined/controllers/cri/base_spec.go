package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
)

// BaseSpecName is the file of CRI's base OCI runtime spec in the CRI config folder, as
// upstream's /etc/cri/conf.d/base-spec.json.
const BaseSpecName = "base-spec.json"

// BaseRuntimeSpec is the base OCI runtime spec of CRI's containers with
// machine.baseRuntimeSpecOverrides merged in: containerd's own default spec (the one CRI starts
// from when it is given none) as JSON, the overrides merged into it as a JSON merge patch
// (RFC 7386: an object merges key by key, any other value replaces, null removes), as upstream
// documents.
func BaseRuntimeSpec(overrides map[string]any) ([]byte, error) {
	def, err := oci.GenerateSpec(namespaces.WithNamespace(context.Background(), "k8s.io"), nil, &containers.Container{})
	if err != nil {
		return nil, fmt.Errorf("containerd's default runtime spec: %w", err)
	}

	var spec map[string]any
	if err = roundTrip(def, &spec); err != nil {
		return nil, err
	}

	// The config's YAML values (ints, nested maps) as JSON's.
	var patch map[string]any
	if err = roundTrip(overrides, &patch); err != nil {
		return nil, fmt.Errorf("machine.baseRuntimeSpecOverrides: %w", err)
	}

	merged, _ := mergePatch(spec, patch).(map[string]any)

	out, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}

	// containerd refuses to start CRI with a base spec it cannot read: say so here, by field.
	var check oci.Spec
	if err = json.Unmarshal(out, &check); err != nil {
		return nil, fmt.Errorf("machine.baseRuntimeSpecOverrides does not make an OCI runtime spec (%w): fix or remove the overriding field", err)
	}

	return out, nil
}

// WriteBaseRuntimeSpec writes BaseRuntimeSpec to dir/BaseSpecName and returns its path, or, with
// no overrides, removes a former one and returns "" (CRI keeps containerd's default).
func WriteBaseRuntimeSpec(dir string, overrides map[string]any) (string, error) {
	path := filepath.Join(dir, BaseSpecName)

	if len(overrides) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}

		return "", nil
	}

	spec, err := BaseRuntimeSpec(overrides)
	if err != nil {
		return "", err
	}

	if err = os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}

	return path, os.WriteFile(path, spec, 0o644)
}

// mergePatch applies patch to target as RFC 7386 says.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}

	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}

	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}

	return t
}

// roundTrip converts in to out through JSON.
func roundTrip(in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}

	return json.Unmarshal(data, out)
}
