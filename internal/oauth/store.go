package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Record is what a sign-in leaves for one server: the client toolmesh used, where to refresh,
// and the tokens. It is a secret as a whole.
type Record struct {
	Server   string `json:"server"`
	Resource string `json:"resource"`
	Issuer   string `json:"issuer"`
	TokenURL string `json:"token_url"`
	// RevocationURL is kept so that toolmesh logout can revoke the tokens.
	RevocationURL string `json:"revocation_url,omitempty"`
	ClientID      string `json:"client_id"`
	// ClientSecret is set only when dynamic registration gave one; a configured secret stays
	// in the environment.
	ClientSecret string        `json:"client_secret,omitempty"`
	Token        *oauth2.Token `json:"token"`
	SignedInAt   time.Time     `json:"signed_in_at"`
}

// ErrNoRecord: nobody has signed in to the server (or the tokens were removed).
var ErrNoRecord = errors.New("no sign-in recorded")

// Store keeps one Record per server.
type Store interface {
	Load(ctx context.Context, server string) (*Record, error)
	Save(ctx context.Context, rec *Record) error
	Delete(ctx context.Context, server string) error
}

// FileStore keeps each server's record in DIR/SERVER.json, mode 0600 in a 0700 directory,
// written atomically (a temporary file renamed over the old one), so a reader never sees half
// a record and a crash never leaves one.
type FileStore struct{ Dir string }

// DefaultDir is $XDG_STATE_HOME/toolmesh/oauth, else ~/.local/state/toolmesh/oauth.
func DefaultDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "toolmesh", "oauth")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "toolmesh-oauth")
	}
	return filepath.Join(home, ".local", "state", "toolmesh", "oauth")
}

func (s FileStore) path(server string) (string, error) {
	if !toolid.ValidServer(server) {
		return "", fmt.Errorf("invalid server name %q", server)
	}
	return filepath.Join(s.Dir, server+".json"), nil
}

func (s FileStore) Load(_ context.Context, server string) (*Record, error) {
	p, err := s.path(server)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoRecord
	}
	if err != nil {
		return nil, fmt.Errorf("reading the sign-in of %s: %w", server, err)
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil || rec.Token == nil {
		// Never quote the file: it holds tokens.
		return nil, fmt.Errorf("the sign-in file %s is damaged; run toolmesh login %s again", p, server)
	}
	return &rec, nil
}

func (s FileStore) Save(_ context.Context, rec *Record) error {
	p, err := s.path(rec.Server)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("token directory: %w", err)
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.Dir, "."+rec.Server+".*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("token directory: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a rename, nothing is left to remove
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing the sign-in of %s: %w", rec.Server, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing the sign-in of %s: %w", rec.Server, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the sign-in of %s: %w", rec.Server, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("writing the sign-in of %s: %w", rec.Server, err)
	}
	return nil
}

func (s FileStore) Delete(_ context.Context, server string) error {
	p, err := s.path(server)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
