package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"
)

// CA is a private certificate authority: toolmesh's own, for a mesh that has none (compose,
// tests). Its certificates use ECDSA P-256, as the Helm chart asks of cert-manager.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CAValidity is how long a CA made by NewCA for Init is valid: it is not rotated by Init, so it
// outlives many certificates it signs.
const CAValidity = 10 * 365 * 24 * time.Hour

// clockSkew backdates every certificate, so a peer whose clock is a little behind accepts it.
const clockSkew = 5 * time.Minute

// NewCA makes a CA named commonName, valid for validFor from now.
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-clockSkew), NotAfter: now.Add(validFor),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// ParseCA reads a CA from its PEM certificate and key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("the CA key is not an ECDSA key")
	}
	if !pair.Leaf.IsCA {
		return nil, errors.New("the CA certificate is not a CA's")
	}
	return &CA{Cert: pair.Leaf, Key: key}, nil
}

// CertPEM is the CA's certificate in PEM: the ca.crt its peers trust.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA's private key in PEM.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Issue signs a new key's certificate for names (DNS names or IP addresses, the first also its
// common name), valid for validFor from now, for use as server and as client: one certificate
// per service serves both ends of mutual TLS, like the one the Helm chart asks cert-manager for.
func (ca *CA) Issue(names []string, validFor time.Duration) (certPEM, keyPEMBytes []byte, err error) {
	if len(names) == 0 {
		return nil, nil, errors.New("a certificate needs at least one name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]},
		NotBefore: now.Add(-clockSkew), NotAfter: now.Add(validFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	k, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), k, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// LoopbackNames are in every certificate Init issues, besides the service's own name: a
// service's health check and `toolmesh up` (every service in one process) dial over loopback.
var LoopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// Layout of a folder Init writes: the CA at its top, and one folder per name laid out as
// cert-manager writes a Secret (and the Helm chart mounts it), so a service mounts its folder
// alone and never sees the CA's key or another service's.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
	CertFile   = "tls.crt"
	KeyFile    = "tls.key"
)

// namePattern is a name Init accepts: a DNS name in lower case, which is also its folder's name.
var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

// InitResult says what Init did for one name.
type InitResult struct {
	Name     string
	Issued   bool // false: the certificate there was kept
	NotAfter time.Time
}

// Init makes dir hold a CA (ca.crt, ca.key), made on the first run and kept after, and for each
// name a folder NAME with tls.crt, tls.key and ca.crt: a certificate for NAME and LoopbackNames.
// A certificate already there is kept while it is signed by the CA, names what it should and
// has more than a third of validFor left; otherwise a new one is issued. Running it at every
// start is therefore cheap, renews certificates before they expire, and issues one for a name
// added later. Every file is replaced by a rename, so a reader sees an old or a new file whole.
func Init(dir string, names []string, validFor time.Duration) ([]InitResult, error) {
	if len(names) == 0 {
		return nil, errors.New("--names: no names given")
	}
	for _, n := range names {
		if len(n) > 253 || !namePattern.MatchString(n) {
			return nil, fmt.Errorf("--names: %q is not a lower-case DNS name (letters, digits, hyphens, dots)", n)
		}
	}
	if validFor < time.Hour {
		return nil, fmt.Errorf("--valid-for: %s is under an hour", validFor)
	}
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	ca, err := initCA(dir)
	if err != nil {
		return nil, err
	}
	var out []InitResult
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		r, err := initName(dir, n, ca, validFor)
		if err != nil {
			return out, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// privateDir makes dir (0700) or checks the one there: a folder every user may write to (a
// shared temporary folder, say) would let another user put their own CA or keys in place, or
// take ours, so it is refused rather than written into.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("%s: every user may write to this folder (mode %04o), so another user could replace the CA or the keys: "+
			"give a folder of your own (--dir), or make this one private (chmod 700 %s)", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// initCA reads the CA in dir, or makes one when there is none.
func initCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := ParseCA(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s and %s: %w", certPath, keyPath, err)
		}
		return ca, nil
	case !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist):
		return nil, fmt.Errorf("%s and %s: want both or neither (remove the folder to start over with a new CA): %w", certPath, keyPath, errors.Join(certErr, keyErr))
	}
	ca, err := NewCA("toolmesh CA", CAValidity)
	if err != nil {
		return nil, err
	}
	k, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	// The key first: a CA certificate without its key would stop the next run.
	if err := writeFile(keyPath, k); err != nil {
		return nil, err
	}
	if err := writeFile(certPath, ca.CertPEM()); err != nil {
		return nil, err
	}
	return ca, nil
}

func initName(dir, name string, ca *CA, validFor time.Duration) (InitResult, error) {
	sub := filepath.Join(dir, name)
	if err := privateDir(sub); err != nil {
		return InitResult{}, err
	}
	caPath := filepath.Join(sub, CACertFile)
	if old, err := os.ReadFile(caPath); err != nil || string(old) != string(ca.CertPEM()) {
		if err := writeFile(caPath, ca.CertPEM()); err != nil {
			return InitResult{}, err
		}
	}
	want := append([]string{name}, LoopbackNames...)
	certPath, keyPath := filepath.Join(sub, CertFile), filepath.Join(sub, KeyFile)
	if leaf, ok := keepable(certPath, keyPath, ca, want, validFor); ok {
		return InitResult{Name: name, NotAfter: leaf.NotAfter}, nil
	}
	certPEM, keyPEM, err := ca.Issue(want, validFor)
	if err != nil {
		return InitResult{}, err
	}
	if err := writeFile(keyPath, keyPEM); err != nil {
		return InitResult{}, err
	}
	if err := writeFile(certPath, certPEM); err != nil {
		return InitResult{}, err
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return InitResult{}, err
	}
	return InitResult{Name: name, Issued: true, NotAfter: leaf.NotAfter}, nil
}

// keepable says whether the certificate at certPath can stay: it loads with its key, ca signed
// it, it names every name in want, and more than a third of validFor is left.
func keepable(certPath, keyPath string, ca *CA, want []string, validFor time.Duration) (*x509.Certificate, bool) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, false
	}
	leaf := pair.Leaf
	if leaf.CheckSignatureFrom(ca.Cert) != nil || time.Until(leaf.NotAfter) <= validFor/3 {
		return nil, false
	}
	for _, n := range want {
		if leaf.VerifyHostname(n) != nil {
			return nil, false
		}
	}
	return leaf, true
}

// writeFile replaces path with data (mode 0600) through a rename.
func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}
