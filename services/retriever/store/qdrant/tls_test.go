package qdrant

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/services/retriever/store"
	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant/qdranttest"
)

// A Qdrant serving TLS with a certificate from a private CA (made here, as an operator would
// with openssl): the store connects when given the CA file, and refuses the certificate without
// it.
func TestTLSWithCAFile(t *testing.T) {
	cert, caPEM := qdranttest.Certificate(t, "127.0.0.1", "localhost")
	d := qdranttest.StartTLS(t, cert)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Second

	s, err := New(t.Context(), Config{Addr: d.Addr(), UseTLS: true, CAFile: caFile, Collection: "tls", Timeout: timeout}, "tls", 3, []string{"words"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready over TLS with the CA file: %v", err)
	}
	if err := s.Upsert(t.Context(), fixture); err != nil {
		t.Fatal(err)
	}
	hits, err := s.Search(t.Context(), store.Query{Dense: []float32{0, 0, 1}, Limit: 1})
	if err != nil || len(hits) != 1 || hits[0].ID != "web.fetch" {
		t.Errorf("search over TLS: got %v, %v; want web.fetch", hits, err)
	}

	// The system's roots do not know the private CA.
	s2, err := New(t.Context(), Config{Addr: d.Addr(), UseTLS: true, Collection: "tls", Timeout: timeout}, "tls", 3, []string{"words"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	err = s2.Ready(t.Context())
	t.Logf("without the CA file: %v", err)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Ready over TLS without the CA file: got %v, want a certificate error", err)
	}
	// Nor does a client without TLS get an answer from a TLS server.
	s3, err := New(t.Context(), Config{Addr: d.Addr(), Collection: "tls", Timeout: timeout}, "tls", 3, []string{"words"})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if err := s3.Ready(t.Context()); err == nil {
		t.Error("Ready without TLS against a TLS server: got no error")
	}
}

func TestCAFileErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing file", Config{UseTLS: true, CAFile: missing}, "read CA file: open " + missing},
		{"a directory", Config{UseTLS: true, CAFile: dir}, "read CA file: read " + dir},
		{"not PEM", Config{UseTLS: true, CAFile: notPEM}, "CA file " + notPEM + " holds no PEM certificate"},
		{"without TLS", Config{CAFile: notPEM}, "CA file " + notPEM + " given without TLS"},
	} {
		tc.cfg.Addr, tc.cfg.Timeout = "127.0.0.1:1", 100*time.Millisecond
		s, err := New(t.Context(), tc.cfg, "m", 3, nil)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
