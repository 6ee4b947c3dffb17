// Package schematic is the Image Factory's schematic: the customizations of a node image
// (extra kernel arguments, initial META values, system extensions, an overlay), in the
// factory's YAML, and its ID. The ID is the hex sha256 of the schematic marshalled by
// gopkg.in/yaml.v3 with the fields in the factory's order, so that an ID names the same
// schematic here and at factory.talos.dev: the empty schematic is
// 376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba there and here.
package schematic

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
)

// FileName is the schematic's file in a signed image and in a boot slot.
const FileName = "schematic.yaml"

// VanillaID is the ID of the empty schematic (`customization: {}`): an image without
// customizations.
const VanillaID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// Schematic is the factory's schematic. The field order and the omitempty tags are part of the
// ID: they decide the YAML that is hashed (customization is always written, even empty).
type Schematic struct {
	Overlay       Overlay       `yaml:"overlay,omitempty"`
	Customization Customization `yaml:"customization"`
}

// Overlay names an overlay image (board support: boot loader, device trees) and its options.
type Overlay struct {
	Image   string         `yaml:"image,omitempty"`
	Name    string         `yaml:"name,omitempty"`
	Options map[string]any `yaml:"options,omitempty"`
}

// Customization is what a schematic changes in the image.
type Customization struct {
	ExtraKernelArgs  []string         `yaml:"extraKernelArgs,omitempty"`
	Meta             []MetaValue      `yaml:"meta,omitempty"`
	SystemExtensions SystemExtensions `yaml:"systemExtensions,omitempty"`
	SecureBoot       SecureBoot       `yaml:"secureboot,omitempty"`
}

// MetaValue is a META key (a tag 0x00-0xff, as upstream's META numbers them) and its value,
// written to META when the image is installed.
type MetaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

// SystemExtensions are the extensions the image carries, by their names in the factory's catalog.
type SystemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// SecureBoot are the SecureBoot options of the factory's SecureBoot ISO.
type SecureBoot struct {
	IncludeWellKnownCertificates bool `yaml:"includeWellKnownCertificates,omitempty"`
}

// Unmarshal reads a schematic strictly: an unknown field (a misspelt one too) is refused with
// its name and line, as the factory refuses it, rather than silently changing nothing.
func Unmarshal(b []byte) (*Schematic, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)

	var s Schematic
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("schematic is empty: the schematic without customizations is `customization: {}`")
		}

		return nil, fmt.Errorf("schematic: %w", err)
	}

	// A second document would be ignored by the factory's decoder too; refusing it says so.
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("schematic: more than one YAML document: a schematic is one document")
	}

	return &s, nil
}

// Marshal is the schematic's canonical YAML, the bytes its ID is the digest of.
func (s *Schematic) Marshal() ([]byte, error) {
	// yaml.v3's Marshal (4-space indent) is what the factory hashes: no other encoder settings.
	return yaml.Marshal(s)
}

// ID is the schematic's ID: the hex sha256 of Marshal.
func (s *Schematic) ID() (string, error) {
	b, err := s.Marshal()
	if err != nil {
		return "", err
	}

	sum := sha256.Sum256(b)

	return hex.EncodeToString(sum[:]), nil
}
