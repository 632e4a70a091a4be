package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/tlsfiles"
)

// TestInit: the layout Init writes (a CA at the top, a cert-manager-style folder per name), what
// each certificate is valid for, and that a second run keeps what is still good.
func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	names := []string{"retriever", "api", "executor", "api"}
	res, err := tlsfiles.Init(dir, names, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res {
		got = append(got, r.Name)
		if !r.Issued {
			t.Errorf("%s: first run kept a certificate, want one issued", r.Name)
		}
	}
	if want := []string{"api", "executor", "retriever"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v (sorted, once each)", got, want)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, tlsfiles.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, name := range []string{"api", "executor", "retriever"} {
		sub := filepath.Join(dir, name)
		for _, f := range []string{tlsfiles.CertFile, tlsfiles.KeyFile, tlsfiles.CACertFile} {
			fi, err := os.Stat(filepath.Join(sub, f))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s/%s: mode %v, want no access for group or others", name, f, fi.Mode().Perm())
			}
		}
		if b, _ := os.ReadFile(filepath.Join(sub, tlsfiles.CACertFile)); string(b) != string(caPEM) {
			t.Errorf("%s/ca.crt is not the CA's certificate", name)
		}
		if _, err := os.Stat(filepath.Join(sub, tlsfiles.CAKeyFile)); err == nil {
			t.Errorf("%s/ holds the CA's key: a service mounting its folder must not see it", name)
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(sub, tlsfiles.CertFile), filepath.Join(sub, tlsfiles.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range append([]string{name}, tlsfiles.LoopbackNames...) {
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("%s's certificate for %s (usage %v): %v", name, host, usage, err)
				}
			}
		}
		if pair.Leaf.VerifyHostname("executor") == nil && name != "executor" {
			t.Errorf("%s's certificate also names executor", name)
		}
		if left := time.Until(pair.Leaf.NotAfter); left < 23*time.Hour || left > 25*time.Hour {
			t.Errorf("%s's certificate valid for %s more, want about 24h", name, left)
		}
		// The files load as a Source, the way a service reads them.
		if _, err := tlsfiles.Load(tlsfiles.Files{Cert: filepath.Join(sub, tlsfiles.CertFile), Key: filepath.Join(sub, tlsfiles.KeyFile), CA: filepath.Join(sub, tlsfiles.CACertFile)}, nil); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	before, _ := os.ReadFile(filepath.Join(dir, "api", tlsfiles.CertFile))
	res, err = tlsfiles.Init(dir, []string{"api", "executor", "retriever", "inference"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Issued != (r.Name == "inference") {
			t.Errorf("second run, %s: issued %v; want only the new name issued", r.Name, r.Issued)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "api", tlsfiles.CertFile)); string(after) != string(before) {
		t.Error("second run replaced api's certificate, which was still good")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, tlsfiles.CACertFile)); string(b) != string(caPEM) {
		t.Error("second run made a new CA")
	}

	// Asked for a longer life, the 24h certificates have less than a third of it left: renewed.
	res, err = tlsfiles.Init(dir, []string{"api"}, 100*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Issued {
		t.Error("a certificate with less than a third of its validity left was kept")
	}
	// A certificate the CA did not sign (a folder copied from elsewhere) is replaced.
	other, err := tlsfiles.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := other.Issue([]string{"executor", "localhost", "127.0.0.1", "::1"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writeTemp(t, filepath.Join(dir, "executor"), tlsfiles.CertFile, cert)
	writeTemp(t, filepath.Join(dir, "executor"), tlsfiles.KeyFile, key)
	res, err = tlsfiles.Init(dir, []string{"executor"}, 24*time.Hour)
	if err != nil || !res[0].Issued {
		t.Errorf("a certificate of another CA: issued %v, err %v; want it replaced", res, err)
	}
}

func TestInitRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		names    []string
		validFor time.Duration
		setup    func(dir string)
		want     string
	}{
		{"no names", nil, time.Hour, nil, "no names"},
		{"a path", []string{"../etc"}, time.Hour, nil, `"../etc" is not a lower-case DNS name`},
		{"upper case", []string{"API"}, time.Hour, nil, "not a lower-case DNS name"},
		{"an IP address", []string{"::1"}, time.Hour, nil, "not a lower-case DNS name"},
		{"too short", []string{"api"}, time.Minute, nil, "--valid-for"},
		{"a CA certificate without its key", []string{"api"}, time.Hour, func(dir string) {
			ca, _ := tlsfiles.NewCA("x", time.Hour)
			writeTemp(t, dir, tlsfiles.CACertFile, ca.CertPEM())
		}, "want both or neither"},
		{"a folder every user may write to", []string{"api"}, time.Hour, func(dir string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, "every user may write to this folder (mode 0777)"},
		{"a name's folder every user may write to", []string{"api"}, time.Hour, func(dir string) {
			if err := os.Mkdir(filepath.Join(dir, "api"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, "api"), 0o757); err != nil {
				t.Fatal(err)
			}
		}, "every user may write to this folder (mode 0757)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.setup != nil {
				tc.setup(dir)
			}
			_, err := tlsfiles.Init(dir, tc.names, tc.validFor)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("tlsfiles.Init(%v, %s) = %v, want an error containing %q", tc.names, tc.validFor, err, tc.want)
			}
		})
	}
}
