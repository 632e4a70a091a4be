// Package tlsfiles reads a TLS certificate, its key and a CA bundle from PEM files, reads them
// again when they change, and writes them (a private CA and certificates it signs, for
// `toolmesh tls init`).
//
// Certificates rotate without a restart: cert-manager renews them in a Kubernetes Secret, and
// the kubelet swaps the mounted files through a symlink (..data). A Source reads the files'
// content again when their directory changes and at an interval (package filewatch, which the
// config reloader uses too), so any way of replacing them works, and every TLS configuration
// it hands out is a snapshot of what it holds then: a handshake asks for one, so new connections use the new
// certificate and trust the new CA while established ones keep theirs. A set of files that does
// not load (a torn copy, a key that does not match, an empty CA file) leaves the previous one in
// force, and is logged.
package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/toolmesh/toolmesh/internal/filewatch"
)

// maxFileBytes bounds one PEM file: a certificate chain or a CA bundle of a few hundred
// certificates is far smaller, and a wrong path (a log, a disk image) must not be read whole.
const maxFileBytes = 1 << 20

// Files names the PEM files of one TLS identity: a certificate (chain) with its private key,
// and the CA certificates that peers' certificates must chain to. Cert and Key go together;
// either pair or CA may be empty (a server identity alone, or a trust bundle alone).
type Files struct {
	Cert, Key, CA string
}

// loaded is one consistent read of the files.
type loaded struct {
	cert *tls.Certificate // nil without Cert
	pool *x509.CertPool   // nil without CA
	raw  [3][]byte        // cert, key and CA as read, to tell a change
}

// Source holds the latest good read of a set of files.
type Source struct {
	files  Files
	logger *slog.Logger
	cur    atomic.Pointer[loaded]
	// lastErr is the last failure logged, so that a broken file is logged once, not every poll.
	lastErr string
}

// Load reads files once; an error names the file and why, so a bad path stops the start.
func Load(files Files, logger *slog.Logger) (*Source, error) {
	if (files.Cert == "") != (files.Key == "") {
		return nil, errors.New("a certificate file and its key file go together")
	}
	if files.Cert == "" && files.CA == "" {
		return nil, errors.New("no certificate and no CA file given")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: files, logger: logger}
	l, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cur.Store(l)
	return s, nil
}

// Certificate is the current certificate, or nil when the source has none.
func (s *Source) Certificate() *tls.Certificate { return s.cur.Load().cert }

// Pool is the current CA pool, or nil when the source has none.
func (s *Source) Pool() *x509.CertPool { return s.cur.Load().pool }

// Files are the files the source reads.
func (s *Source) Files() Files { return s.files }

// Reload reads the files again. It reports whether their content changed and was taken; on an
// error the previous content stays in force.
func (s *Source) Reload() (bool, error) {
	prev := s.cur.Load()
	raw, err := s.readRaw()
	if err != nil {
		return false, err
	}
	if same(raw, prev.raw) {
		return false, nil
	}
	l, err := parse(s.files, raw)
	if err != nil {
		return false, err
	}
	s.cur.Store(l)
	return true, nil
}

// Run reads the files again whenever they may have changed (filewatch: a change in their
// directories, or every interval) until ctx ends, logging each change taken and each set of
// files refused (once per distinct failure).
func (s *Source) Run(ctx context.Context, interval time.Duration) {
	var files []string
	for _, f := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if f != "" {
			files = append(files, f)
		}
	}
	w, err := filewatch.New(files, interval, s.logger)
	if err != nil {
		s.logger.Warn("tls files: cannot watch them for changes; the ones loaded stay in force", "err", err)
		<-ctx.Done()
		return
	}
	defer w.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.C:
		}
		s.poll()
	}
}

func (s *Source) poll() {
	changed, err := s.Reload()
	switch {
	case err != nil:
		if msg := err.Error(); msg != s.lastErr {
			s.lastErr = msg
			s.logger.Warn("tls files changed but do not load; keeping the previous ones", "err", err)
		}
	case changed:
		s.lastErr = ""
		args := []any{"cert_file", s.files.Cert, "ca_file", s.files.CA}
		if c := s.Certificate(); c != nil && c.Leaf != nil {
			args = append(args, "subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter)
		}
		s.logger.Info("tls files reloaded", args...)
	}
}

func same(a, b [3][]byte) bool {
	return bytes.Equal(a[0], b[0]) && bytes.Equal(a[1], b[1]) && bytes.Equal(a[2], b[2])
}

func (s *Source) read() (*loaded, error) {
	raw, err := s.readRaw()
	if err != nil {
		return nil, err
	}
	return parse(s.files, raw)
}

// readRaw reads the three files, each at most maxFileBytes.
func (s *Source) readRaw() ([3][]byte, error) {
	var raw [3][]byte
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if p == "" {
			continue
		}
		b, err := readBounded(p)
		if err != nil {
			return raw, err
		}
		raw[i] = b
	}
	return raw, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes, not a PEM certificate or key", path, maxFileBytes)
	}
	return b, nil
}

// parse checks a read of the files: the key matches the certificate, the CA file holds at least
// one certificate, and, when a source has both, the certificate chains to that CA (its peers
// trust the same CA, so a certificate it does not sign would be refused by all of them).
func parse(files Files, raw [3][]byte) (*loaded, error) {
	l := &loaded{raw: raw}
	if files.Cert != "" {
		pair, err := tls.X509KeyPair(raw[0], raw[1])
		if err != nil {
			return nil, fmt.Errorf("%s and %s: %w", files.Cert, files.Key, err)
		}
		l.cert = &pair
	}
	if files.CA != "" {
		cas, err := parseCerts(raw[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", files.CA, err)
		}
		l.pool = x509.NewCertPool()
		for _, c := range cas {
			l.pool.AddCert(c)
		}
	}
	if l.cert != nil && l.pool != nil {
		if err := verifyChain(l.cert, l.pool); err != nil {
			return nil, fmt.Errorf("%s is not signed by the CA of %s: %w", files.Cert, files.CA, err)
		}
	}
	return l, nil
}

// parseCerts reads every CERTIFICATE block of a PEM bundle.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return out, nil
}

// verifyChain checks a certificate against a pool the way its peers will (any usage: the same
// certificate may serve as server and as client).
func verifyChain(cert *tls.Certificate, pool *x509.CertPool) error {
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		inter.AddCert(c)
	}
	_, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}
