package imager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/talos-go/talos/internal/schematic"
)

// SchematicName is the schematic an image may carry (internal/schematic's YAML, as marshalled:
// its sha256 is the schematic's ID). A metal node boots its slot with the schematic's extra
// kernel arguments and writes its META values when it installs the image.
const SchematicName = schematic.FileName

// LoadSchematic reads a schematic file and refuses what images here cannot carry yet.
func LoadSchematic(path string) (*schematic.Schematic, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the schematic: %w", err)
	}

	s, err := schematic.Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}

	if err = CheckSchematic(s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}

	return s, nil
}

// CheckSchematic refuses the parts of a schematic an image here cannot carry: system
// extensions, an overlay and the SecureBoot ISO's options. Building the image without them
// would give it the schematic's ID while it lacks what the ID promises.
func CheckSchematic(s *schematic.Schematic) error {
	c := s.Customization

	switch {
	case len(c.SystemExtensions.OfficialExtensions) > 0:
		return fmt.Errorf("customization.systemExtensions %v: images here carry no system extensions yet: remove them from the schematic", c.SystemExtensions.OfficialExtensions)
	case s.Overlay.Image != "" || s.Overlay.Name != "" || len(s.Overlay.Options) > 0:
		return errors.New("overlay: images here have no overlays (board support images): remove it from the schematic")
	case c.SecureBoot.IncludeWellKnownCertificates:
		return errors.New("customization.secureboot.includeWellKnownCertificates: there is no SecureBoot ISO here to enroll them: remove it from the schematic")
	}

	for _, arg := range c.ExtraKernelArgs {
		if arg == "" || containsSpace(arg) {
			return fmt.Errorf("customization.extraKernelArgs: %q is not one kernel argument: give each as its own list item", arg)
		}
	}

	return nil
}

func containsSpace(s string) bool {
	for _, r := range s {
		if r == ' ' || r == '\t' || r == '\n' || r == '"' {
			return true
		}
	}

	return false
}

// writeSchematic writes s as marshalled into dir, for an image's payload, and returns the
// file and the schematic's ID.
func writeSchematic(s *schematic.Schematic, dir string) (string, string, error) {
	b, err := s.Marshal()
	if err != nil {
		return "", "", err
	}

	id, err := s.ID()
	if err != nil {
		return "", "", err
	}

	path := filepath.Join(dir, SchematicName)

	return path, id, os.WriteFile(path, b, 0o644)
}

// ReadSlotSchematic reads the schematic a slot (an unpacked image) carries, and its ID; nil
// when it carries none.
func ReadSlotSchematic(dir string) (*schematic.Schematic, string, error) {
	b, err := readSmall(filepath.Join(dir, SchematicName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	} else if err != nil {
		return nil, "", err
	}

	s, err := schematic.Unmarshal(b)
	if err != nil {
		return nil, "", fmt.Errorf("slot %s: %w", dir, err)
	}

	id, err := s.ID()

	return s, id, err
}
