package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// TLS between toolmesh services takes a new configuration for every handshake (config returns
// a snapshot of the certificate and CAs in force: tlsfiles), so certificates and CAs rotated on
// disk apply to the next connection without rebuilding a server or a client. Established
// connections keep what they were made with.

// ServerTLS is the transport credentials of a gRPC server (grpc.Creds) whose TLS configuration
// is config's answer at each handshake.
func ServerTLS(config func() *tls.Config) credentials.TransportCredentials {
	// grpc-go adds its ALPN protocol ("h2") to each configuration GetConfigForClient returns.
	return credentials.NewTLS(&tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return config(), nil },
	})
}

// ClientTLS is the transport credentials of a client (grpc.WithTransportCredentials) whose TLS
// configuration is config's answer at each handshake. The server's certificate must name
// serverName, or, when it is empty, the host of the address dialled. The name is set here rather
// than in config because grpc-go sets every configuration's ServerName from the dialled
// authority, and an address list (ipv4:A,B) or an IP address has no name a certificate carries.
func ClientTLS(config func() *tls.Config, serverName string) credentials.TransportCredentials {
	return &clientTLS{config: config, serverName: serverName}
}

type clientTLS struct {
	config     func() *tls.Config
	serverName string
}

func (c *clientTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c.serverName != "" {
		authority = c.serverName
	}
	return credentials.NewTLS(c.config()).ClientHandshake(ctx, authority, raw)
}

func (c *clientTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("server: client TLS credentials used by a server")
}

func (c *clientTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2", ServerName: c.serverName}
}

func (c *clientTLS) Clone() credentials.TransportCredentials {
	clone := *c
	return &clone
}

// OverrideServerName is part of grpc-go's interface (deprecated there).
func (c *clientTLS) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}
