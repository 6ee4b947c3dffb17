package apid

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// handle is the router's gRPC handler of every method: it asks direct where the call goes
// with the roles the relay decided, and carries it there.
func (s *Server) handle(_ any, stream grpc.ServerStream) error {
	ctx := stream.Context()

	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "no method in stream")
	}

	roles := routerRoles(ctx)
	md, _ := metadata.FromIncomingContext(ctx)

	d, err := s.direct(method, roles, md)
	if err != nil {
		return err
	}

	if d.inspect {
		// Sensitive resources need os:admin: look at the request before forwarding it.
		var first frame

		if err = stream.RecvMsg(&first); err != nil {
			return err
		}

		ns, typ, err := cosiTarget(method, first.payload)
		if err != nil {
			return err
		}

		if err = AuthorizeResource(ns, typ, roles); err != nil {
			return err
		}

		stream = &replayStream{ServerStream: stream, first: &first}
	}

	out := forwardMD(md, roles)

	switch d.mode {
	case toMachined:
		return oneToOne(stream, s.local, method, d.method, out)
	case toNode:
		conn, release, err := s.conn(d.targets[0])
		if err != nil {
			return err
		}
		defer release()

		return oneToOne(stream, conn, method, d.method, out)
	}

	if d.method.serverStreams {
		return s.fanOutStream(stream, d.targets, method, out)
	}

	return s.fanOutUnary(stream, d.targets, method, out)
}

// oneToOne forwards a call unchanged, streams included.
func oneToOne(stream grpc.ServerStream, conn *grpc.ClientConn, method string, info methodInfo, md metadata.MD) error {
	ctx := metadata.NewOutgoingContext(stream.Context(), md)

	if !info.clientStreams && !info.serverStreams {
		var req, resp frame

		if err := stream.RecvMsg(&req); err != nil {
			return err
		}

		var header, trailer metadata.MD

		err := conn.Invoke(ctx, method, &req, &resp, grpc.Header(&header), grpc.Trailer(&trailer))

		stream.SetTrailer(trailer)

		if err != nil {
			return err
		}

		if len(header) > 0 {
			if err = stream.SendHeader(header); err != nil {
				return err
			}
		}

		return stream.SendMsg(&resp)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	client, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}

	// caller → backend
	upErr := make(chan error, 1)

	go func() {
		upErr <- pumpUp(stream, client)
	}()

	// backend → caller
	header, err := client.Header()
	if err == nil && len(header) > 0 {
		if err = stream.SendHeader(header); err != nil {
			return err
		}
	}

	for {
		var f frame

		if err = client.RecvMsg(&f); err != nil {
			break
		}

		if err = stream.SendMsg(&f); err != nil {
			return err
		}
	}

	stream.SetTrailer(client.Trailer())

	if errors.Is(err, io.EOF) {
		// The backend finished; a failed upstream read (caller went away) is moot now.
		return nil
	}

	select {
	case uerr := <-upErr:
		if uerr != nil && status.Code(err) == codes.Canceled {
			return uerr
		}
	default:
	}

	return err
}

// pumpUp copies the caller's messages to the backend and half-closes it at the end.
func pumpUp(stream grpc.ServerStream, client grpc.ClientStream) error {
	for {
		var f frame

		if err := stream.RecvMsg(&f); err != nil {
			if errors.Is(err, io.EOF) {
				return client.CloseSend()
			}

			return err
		}

		if err := client.SendMsg(&f); err != nil {
			// The backend's own error comes back through RecvMsg.
			return nil //nolint:nilerr // the backend reports its own error through RecvMsg
		}
	}
}

// nodeError renders a node's failure for metadata.error.
func nodeError(err error) (string, int32) {
	st := status.Convert(err)

	return st.Message(), int32(st.Code())
}

// fanOutUnary calls every target in parallel and merges the replies into one; a failed node
// contributes a message with metadata.error and the call still succeeds.
func (s *Server) fanOutUnary(stream grpc.ServerStream, list []string, method string, md metadata.MD) error {
	var req frame

	if err := stream.RecvMsg(&req); err != nil {
		return err
	}

	ctx := metadata.NewOutgoingContext(stream.Context(), md)
	replies := make([][]byte, len(list))

	var wg sync.WaitGroup

	for i, target := range list {
		s.spawn(&wg, func() {
			replies[i] = s.callOne(ctx, target, method, &req)
		})
	}

	wg.Wait()

	size := 0
	for _, r := range replies {
		size += len(r)
	}

	merged := make([]byte, 0, size)
	for _, r := range replies {
		merged = append(merged, r...)
	}

	return stream.SendMsg(&frame{payload: merged})
}

// callOne makes one node's part of a fan-out and returns its stamped reply.
func (s *Server) callOne(ctx context.Context, target, method string, req *frame) []byte {
	conn, release, err := s.conn(target)
	if err != nil {
		msg, code := nodeError(err)

		return errorReply(target, msg, code)
	}
	defer release()

	var resp frame

	if err = conn.Invoke(ctx, method, req, &resp); err != nil {
		msg, code := nodeError(err)

		return errorReply(target, msg, code)
	}

	stamped, err := stampReply(resp.payload, target)
	if err != nil {
		return errorReply(target, err.Error(), int32(codes.Internal))
	}

	return stamped
}

// fanOutStream opens the server stream on every target and merges their messages as they come,
// each stamped with its node; a node that fails adds one message carrying its error.
func (s *Server) fanOutStream(stream grpc.ServerStream, list []string, method string, md metadata.MD) error {
	var req frame

	if err := stream.RecvMsg(&req); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(stream.Context(), md))
	defer cancel()

	msgs := make(chan []byte)

	var wg sync.WaitGroup

	send := func(b []byte) bool {
		select {
		case msgs <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}

	for _, target := range list {
		wg.Add(1)

		go func() {
			defer wg.Done()

			if err := s.streamOne(ctx, target, method, &req, send); err != nil && ctx.Err() == nil {
				msg, code := nodeError(err)
				send(errorStreamMessage(target, msg, code))
			}
		}()
	}

	go func() {
		wg.Wait()
		close(msgs)
	}()

	var sendErr error

	for b := range msgs {
		if sendErr != nil {
			continue // drain so the node goroutines can finish
		}

		if err := stream.SendMsg(&frame{payload: b}); err != nil {
			sendErr = err

			cancel()
		}
	}

	return sendErr
}

func (s *Server) streamOne(ctx context.Context, target, method string, req *frame, send func([]byte) bool) error {
	conn, release, err := s.conn(target)
	if err != nil {
		return err
	}
	defer release()

	client, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}

	if err = client.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}

	if err = client.CloseSend(); err != nil {
		return err
	}

	for {
		var f frame

		if err = client.RecvMsg(&f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}

			return err
		}

		if !send(stampStreamMessage(f.payload, target)) {
			return ctx.Err()
		}
	}
}
