package apid

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// withEKU is a client certificate from ca with the given extended key usages.
func (ca *testCA) withEKU(t testing.TB, ekus []x509.ExtKeyUsage, roles ...string) tls.Certificate {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "test", Organization: roles},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: ekus,
	}, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// apiMethods are every method of every service of the machine API, from machinery's
// descriptors (the services TestAuthzTableCoversEveryMethod checks the table against).
func apiMethods(t *testing.T) []protoreflect.MethodDescriptor {
	t.Helper()

	var res []protoreflect.MethodDescriptor

	for _, svc := range []string{
		"machine.MachineService", "cluster.ClusterService", "inspect.InspectService",
		"storage.StorageService", "time.TimeService", "cosi.resource.State",
	} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}

		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			res = append(res, methods.Get(i))
		}
	}

	return res
}

// callAny calls any method with an empty request and reads one reply (any kind of stream).
func callAny(ctx context.Context, conn *grpc.ClientConn, m protoreflect.MethodDescriptor) error {
	name := "/" + string(m.Parent().FullName()) + "/" + string(m.Name())

	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, name)
	if err != nil {
		return err
	}

	if err = s.SendMsg(dynamicpb.NewMessage(m.Input())); err != nil {
		return s.RecvMsg(dynamicpb.NewMessage(m.Output()))
	}

	s.CloseSend()

	return s.RecvMsg(dynamicpb.NewMessage(m.Output()))
}

// Every method of the API, called with every kind of bad client certificate and with every
// role: a certificate that is expired, from a foreign CA or without the ClientAuth usage is
// refused at the handshake (the call fails Unavailable: with TLS 1.3 the client learns it on its
// first write, "bad certificate" or a broken pipe, and no method ever answers); a
// role the method does not allow gets PermissionDenied; a role it allows is not refused by
// authorization (the fake machined behind may still answer Unimplemented or fail otherwise).
func TestEveryMethodCertificatesAndRoles(t *testing.T) {
	ca, foreign := newCA(t), newCA(t)
	n := startNode(t, ca)
	methods := apiMethods(t)

	for name, cert := range map[string]tls.Certificate{
		"expired":           ca.client(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "os:admin"),
		"foreign CA":        foreign.roleCert(t, "os:admin"),
		"no ClientAuth EKU": ca.withEKU(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "os:admin"),
	} {
		conn := dial(t, ca, n.addr, cert)

		for _, m := range methods {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			err := callAny(ctx, conn, m)

			cancel()

			if code := status.Code(err); code != codes.Unavailable {
				t.Errorf("%s: %s: want the handshake refused (Unavailable), got %v", name, m.FullName(), err)
			}
		}
	}

	for _, roles := range [][]string{nil, {"os:reader"}, {"os:operator"}, {"os:etcd:backup"}, {"os:admin"}, {"os:impersonator"}} {
		conn := dial(t, ca, n.addr, ca.roleCert(t, roles...))
		set, _ := role.Parse(roles)
		refused := 0

		for _, m := range methods {
			method := "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
			allowed := Authorize(method, set) == nil

			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			err := callAny(ctx, conn, m)

			cancel()

			switch code := status.Code(err); {
			case !allowed && code != codes.PermissionDenied:
				t.Errorf("%v %s: want PermissionDenied, got %v", roles, method, err)
			case allowed && code == codes.PermissionDenied:
				t.Errorf("%v %s: allowed by the table but refused: %v", roles, method, err)
			case !allowed:
				refused++
			}
		}

		// (A certificate with no extended usage extension at all is valid for any usage, as X.509
		// says: only one that lists usages without ClientAuth is refused.)

		// The table's shape, checked independently of it: no role but admin reaches every
		// method, and os:reader reaches none that changes the node.
		if !slices.Equal(roles, []string{"os:admin"}) && refused == 0 {
			t.Errorf("%v may call every method", roles)
		}

		t.Logf("%v: %d of %d methods refused", roles, refused, len(methods))
	}
}
