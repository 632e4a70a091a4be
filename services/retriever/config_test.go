package retriever

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant/qdranttest"
)

// parseConfig is the retriever's config after the flags in args.
func parseConfig(t *testing.T, args ...string) Config {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// --retriever.qdrant.ca-file makes the retriever trust a Qdrant whose TLS certificate comes from
// a private CA (made here); the flag is checked and a bad file named.
func TestQdrantCAFileFlag(t *testing.T) {
	cert, caPEM := qdranttest.Certificate(t, "127.0.0.1")
	d := qdranttest.StartTLS(t, cert)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "qdrant-ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "key.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := parseConfig(t, "--retriever.store=qdrant", "--retriever.qdrant.addr="+d.Addr(),
		"--retriever.qdrant.tls", "--retriever.qdrant.ca-file="+caFile)
	s, err := New(t.Context(), cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ready(context.Background()); err != nil {
		t.Errorf("the store over TLS with the CA file: %v", err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"without TLS", []string{"--retriever.qdrant.ca-file=" + caFile}, "retriever.qdrant.ca-file: needs retriever.qdrant.tls"},
		{"missing file", []string{"--retriever.qdrant.tls", "--retriever.qdrant.ca-file=" + filepath.Join(dir, "none.pem")}, "read CA file: open " + filepath.Join(dir, "none.pem")},
		{"not a certificate", []string{"--retriever.qdrant.tls", "--retriever.qdrant.ca-file=" + notPEM}, "CA file " + notPEM + " holds no PEM certificate"},
	} {
		cfg := parseConfig(t, append([]string{"--retriever.store=qdrant", "--retriever.qdrant.addr=" + d.Addr()}, tc.args...)...)
		s, err := New(t.Context(), cfg, nil, nil)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
