package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"errors"
)

// The configurations below are snapshots: a caller asks for one per handshake (a gRPC
// credentials' handshake, tls.Config.GetConfigForClient), so each new connection sees the files
// as they are then.

// ServerConfig is a server configuration with cert's current certificate. With clientCAs,
// client certificates are checked against its current CA pool, as auth says
// (tls.RequireAndVerifyClientCert: mutual TLS; tls.VerifyClientCertIfGiven: optional).
func ServerConfig(cert, clientCAs *Source, auth tls.ClientAuthType) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c := cert.Certificate(); c != nil {
		cfg.Certificates = []tls.Certificate{*c}
	}
	if clientCAs != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCAs.Pool(), auth
	}
	return cfg
}

// ClientConfig is a client configuration that verifies the server's certificate against roots'
// current CA pool and, when cert is not nil, presents cert's current certificate. The caller
// sets ServerName.
func ClientConfig(cert, roots *Source) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots.Pool()}
	if cert != nil {
		if c := cert.Certificate(); c != nil {
			cfg.Certificates = []tls.Certificate{*c}
		}
	}
	return cfg
}

// PinnedConfig is a client configuration that accepts exactly the certificate server holds
// now, whatever name or CA it has: for a client of a server in the same process (the REST
// gateway of the api's own gRPC port), which knows the one certificate it must see.
func PinnedConfig(server *Source) *tls.Config {
	want := server.Certificate()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is the comparison below, which is stricter than a chain and a name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if want == nil || len(cs.PeerCertificates) == 0 || len(want.Certificate) == 0 ||
				!bytes.Equal(cs.PeerCertificates[0].Raw, want.Certificate[0]) {
				return errors.New("the server's certificate is not the one this process serves")
			}
			return nil
		},
	}
}
