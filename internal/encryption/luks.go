package encryption

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Magic starts a LUKS header (both LUKS1 and LUKS2).
var Magic = []byte("LUKS\xba\xbe")

// IsLUKS tells whether the device holds a LUKS header.
func IsLUKS(dev string) (bool, error) {
	f, err := os.Open(dev)
	if err != nil {
		return false, err
	}
	defer f.Close()

	b := make([]byte, len(Magic))
	if _, err = io.ReadFull(f, b); err != nil {
		return false, err
	}

	return bytes.Equal(b, Magic), nil
}

// MappedName is the device-mapper name an opened volume gets: /dev/mapper/luks2-<label>.
func MappedName(label string) string { return "luks2-" + label }

// Cryptsetup runs cryptsetup: on the node itself, or chrooted in the node image from the boot
// stage, whose initramfs carries no cryptsetup.
type Cryptsetup struct {
	Root string // chroot to this folder first (it has /dev, /proc and /sys mounted); "" for none
}

// PBKDF settings for the key slots: argon2id as cryptsetup's default, its memory bounded so a
// small machine can open the volume (cryptsetup would take up to 1 GiB or half the memory).
var pbkdfArgs = []string{"--pbkdf", "argon2id", "--pbkdf-memory", "131072", "--iter-time", "1000"}

// run runs cryptsetup with the secrets as files /proc/self/fd/3, 4, ... (pipes, never on disk
// or in the arguments) and returns its output.
func (c Cryptsetup) run(ctx context.Context, secrets [][]byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "/usr/sbin/cryptsetup", append([]string{"--batch-mode", "--disable-locks", "--disable-keyring"}, args...)...)
	// Without udevd's cookies libdevmapper makes the /dev/mapper nodes itself.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin", "DM_DISABLE_UDEV=1"}

	if c.Root != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.Root}
		cmd.Dir = "/"
	}

	for _, s := range secrets {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}

		_, err = w.Write(s) // a passphrase is far below a pipe's buffer
		w.Close()

		defer r.Close()

		if err != nil {
			return nil, err
		}

		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	}

	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr

	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("cryptsetup %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}

	return out.Bytes(), nil
}

func secretFile(i int) string { return "/proc/self/fd/" + strconv.Itoa(3+i) }

// Format makes dev a LUKS2 volume with every key of the spec in its slot (KMS keys' sealed
// passphrases in header tokens), and opens it as MappedName(env.Label). What dev held is lost.
func (c Cryptsetup) Format(ctx context.Context, dev string, s *Spec, env Env) error {
	var first []byte

	for i, k := range s.Keys {
		p, tok, err := env.newPassphrase(ctx, k)
		if err != nil {
			return err
		}

		slot := strconv.Itoa(k.Slot)

		if i == 0 {
			args := append([]string{"luksFormat", "--type", "luks2", "--key-slot", slot, "--key-file", secretFile(0)}, pbkdfArgs...)
			if s.Cipher != "" {
				args = append(args, "--cipher", s.Cipher)
			}

			if s.KeySize != 0 {
				args = append(args, "--key-size", strconv.FormatUint(uint64(s.KeySize), 10))
			}

			if s.BlockSize != 0 {
				args = append(args, "--sector-size", strconv.FormatUint(s.BlockSize, 10))
			}

			if _, err = c.run(ctx, [][]byte{p}, append(args, dev)...); err != nil {
				return err
			}

			first = p
		} else {
			args := append([]string{"luksAddKey", "--key-file", secretFile(0), "--new-key-slot", slot}, pbkdfArgs...)
			if _, err = c.run(ctx, [][]byte{first, p}, append(args, dev, secretFile(1))...); err != nil {
				return err
			}
		}

		if tok != nil {
			b, err := json.Marshal(tok)
			if err != nil {
				return err
			}

			if _, err = c.run(ctx, [][]byte{b}, "token", "import", "--token-id", slot, "--json-file", secretFile(0), dev); err != nil {
				return err
			}
		}
	}

	return c.open(ctx, dev, s, env.Label, first, s.Keys[0].Slot)
}

// Open opens dev as MappedName(env.Label) with the first of the spec's keys that works, and
// returns that key.
func (c Cryptsetup) Open(ctx context.Context, dev string, s *Spec, env Env) (Key, error) {
	var errs []error

	for _, k := range s.Keys {
		var tok *Token

		if k.KMS != "" || k.TPM {
			out, err := c.run(ctx, nil, "token", "export", "--token-id", strconv.Itoa(k.Slot), dev)
			if err != nil {
				errs = append(errs, err)

				continue
			}

			tok = &Token{}
			if err = json.Unmarshal(out, tok); err != nil {
				errs = append(errs, fmt.Errorf("%s key slot %d: its header token: %w", env.Label, k.Slot, err))

				continue
			}
		}

		p, err := env.passphrase(ctx, k, tok)
		if err != nil {
			errs = append(errs, err)

			continue
		}

		if err = c.open(ctx, dev, s, env.Label, p, k.Slot); err != nil {
			errs = append(errs, fmt.Errorf("%s key slot %d (%s): %w", env.Label, k.Slot, k.Kind(), err))

			continue
		}

		return k, nil
	}

	return Key{}, fmt.Errorf("no key opens %s: %w", env.Label, errors.Join(errs...))
}

func (c Cryptsetup) open(ctx context.Context, dev string, s *Spec, label string, p []byte, slot int) error {
	args := []string{"open", "--type", "luks2", "--key-slot", strconv.Itoa(slot), "--key-file", secretFile(0)}
	for _, o := range s.Options {
		args = append(args, "--perf-"+o)
	}

	_, err := c.run(ctx, [][]byte{p}, append(args, dev, MappedName(label))...)

	return err
}

// Close closes an opened volume.
func (c Cryptsetup) Close(ctx context.Context, label string) error {
	_, err := c.run(ctx, nil, "close", MappedName(label))

	return err
}
