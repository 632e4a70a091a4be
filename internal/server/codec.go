package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	protov2 "google.golang.org/protobuf/proto"
)

// grpc-go answers a request it cannot decode (say, arguments nested past protobuf's recursion
// limit) with Internal, which tells the caller the server broke. The caller sent bad input, so
// the request codec lets the decode "succeed" with an empty message and leaves the error for
// the first interceptor, which answers InvalidArgument before any handler sees the message.
type requestCodec struct {
	encoding.CodecV2
	failed *sync.Map // decoded message → its decode error
}

func newRequestCodec() requestCodec {
	return requestCodec{CodecV2: encoding.GetCodecV2(proto.Name), failed: new(sync.Map)}
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(protov2.Message)
	if !ok {
		return err
	}
	protov2.Reset(m)
	c.failed.Store(v, err)
	return nil
}

// take returns the decode error recorded for msg, once.
func (c requestCodec) take(msg any) error {
	v, ok := c.failed.LoadAndDelete(msg)
	if !ok {
		return nil
	}
	name := "request"
	if m, ok := msg.(protov2.Message); ok {
		name = string(m.ProtoReflect().Descriptor().FullName())
	}
	return status.Errorf(codes.InvalidArgument, "cannot decode the %s: %v", name, v)
}

func (c requestCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.take(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (c requestCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, decodeCheckedStream{ServerStream: ss, codec: c})
}

type decodeCheckedStream struct {
	grpc.ServerStream
	codec requestCodec
}

func (s decodeCheckedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.codec.take(m)
}
