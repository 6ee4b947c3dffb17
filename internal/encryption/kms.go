package encryption

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"

	"github.com/siderolabs/kms-client/api/kms"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// kmsClient is a KMS reached over gRPC (upstream's KMS API, siderolabs/kms-client).
type kmsClient struct {
	conn *grpc.ClientConn
	api  kms.KMSServiceClient
}

// DialKMS connects to a KMS endpoint as the config names it: grpc://host:port (plain, as
// upstream's test KMS) or https://host:port (TLS, the system's roots).
func DialKMS(endpoint string) (Sealer, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("KMS endpoint %q: give grpc://host:port or https://host:port", endpoint)
	}

	var creds credentials.TransportCredentials

	switch u.Scheme {
	case "grpc":
		creds = insecure.NewCredentials()
	case "https":
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	default:
		return nil, fmt.Errorf("KMS endpoint %q: the scheme is grpc:// or https://", endpoint)
	}

	conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}

	return &kmsClient{conn: conn, api: kms.NewKMSServiceClient(conn)}, nil
}

func (c *kmsClient) Seal(ctx context.Context, nodeUUID string, data []byte) ([]byte, error) {
	resp, err := c.api.Seal(ctx, &kms.Request{NodeUuid: nodeUUID, Data: data}, grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}

	return resp.GetData(), nil
}

func (c *kmsClient) Unseal(ctx context.Context, nodeUUID string, data []byte) ([]byte, error) {
	resp, err := c.api.Unseal(ctx, &kms.Request{NodeUuid: nodeUUID, Data: data}, grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}

	return resp.GetData(), nil
}

func (c *kmsClient) Close() error { return c.conn.Close() }
