// Package kms is the key management server `talosctl cluster create` runs for its nodes'
// --disk-encryption-key-types kms keys, as upstream's: upstream's KMS API (Seal, Unseal) on the
// cluster network's gateway, sealing with AES-256-GCM under a key of the cluster's, the node's
// UUID bound in as additional data (one node cannot unseal another's key).
package kms

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"github.com/siderolabs/kms-client/api/kms"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server seals and unseals the nodes' keys.
type Server struct {
	kms.UnimplementedKMSServiceServer

	aead cipher.AEAD
}

// LoadOrCreateKey reads the cluster's sealing key from path, making it (0600) when missing.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err = rand.Read(key); err != nil {
			return nil, err
		}

		return key, os.WriteFile(path, key, 0o600)
	}

	if err == nil && len(key) != 32 {
		return nil, fmt.Errorf("the KMS key %s is %d bytes, not 32: it is damaged (without it the nodes' KMS-sealed volumes do not open)", path, len(key))
	}

	return key, err
}

// NewServer seals with the 32-byte key.
func NewServer(key []byte) (*Server, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}

	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}

	return &Server{aead: aead}, nil
}

// Seal implements kms.KMSServiceServer.
func (s *Server) Seal(_ context.Context, req *kms.Request) (*kms.Response, error) {
	if req.GetNodeUuid() == "" || len(req.GetData()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "node_uuid and data are required")
	}

	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}

	return &kms.Response{Data: s.aead.Seal(nonce, nonce, req.GetData(), []byte(req.GetNodeUuid()))}, nil
}

// Unseal implements kms.KMSServiceServer.
func (s *Server) Unseal(_ context.Context, req *kms.Request) (*kms.Response, error) {
	data := req.GetData()
	if req.GetNodeUuid() == "" || len(data) < s.aead.NonceSize() {
		return nil, status.Error(codes.InvalidArgument, "node_uuid and sealed data are required")
	}

	plain, err := s.aead.Open(nil, data[:s.aead.NonceSize()], data[s.aead.NonceSize():], []byte(req.GetNodeUuid()))
	if err != nil {
		return nil, status.Error(codes.PermissionDenied, "the data was not sealed here for this node")
	}

	return &kms.Response{Data: plain}, nil
}
