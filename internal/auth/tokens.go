package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
)

// EnvTokens is the environment variable the caller reads and hands to Load and New.
const EnvTokens = "TOOLMESH_API_TOKENS"

// MinTokenLen is the shortest token accepted. Shorter ones are guessable and are refused
// rather than warned about, so a placeholder like "changeme" never guards a deployment.
const MinTokenLen = 16

const maxNameLen = 64

// Token is one configured API token. Only its name and the SHA-256 digest of its secret are
// kept, so neither a log line nor a debugger printing a Token can show the secret.
type Token struct {
	// Name identifies the client in logs and in Name(ctx): the NAME of a NAME:TOKEN entry, or
	// "file:LINE" / "env:N" for a bare token.
	Name   string
	digest [sha256.Size]byte
}

// Load reads tokens from the file at path (skipped when path is "") and from env, the value of
// TOOLMESH_API_TOKENS (skipped when ""), and returns both sets together. No tokens and no
// error means auth is off. Errors name the file line or env entry and never contain a token.
func Load(path, env string) ([]Token, error) {
	var entries []entry
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tokens file: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			entries = append(entries, entry{where: fmt.Sprintf("tokens file %s line %d", path, n), dflt: fmt.Sprintf("file:%d", n), text: line})
		}
		if err := sc.Err(); err != nil {
			// The scanner's error (a line over 64 KiB) carries no file content.
			return nil, fmt.Errorf("tokens file %s: %w", path, err)
		}
	}
	if env != "" {
		for i, part := range strings.Split(env, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			entries = append(entries, entry{where: fmt.Sprintf("%s entry %d", EnvTokens, i+1), dflt: fmt.Sprintf("env:%d", i+1), text: part})
		}
	}

	tokens := make([]Token, 0, len(entries))
	nameAt := map[string]string{}
	digestAt := map[[sha256.Size]byte]string{}
	for _, e := range entries {
		t, err := e.parse()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.where, err)
		}
		if prev, ok := nameAt[t.Name]; ok {
			return nil, fmt.Errorf("%s: name %q is also used by %s", e.where, t.Name, prev)
		}
		// Two names for one secret would make the name in logs a guess.
		if prev, ok := digestAt[t.digest]; ok {
			return nil, fmt.Errorf("%s: same token as %s", e.where, prev)
		}
		nameAt[t.Name], digestAt[t.digest] = e.where, e.where
		tokens = append(tokens, t)
	}
	return tokens, nil
}

// entry is one non-blank, non-comment line of the file or one item of the env list.
type entry struct {
	where string // for errors: "tokens file F line 3"
	dflt  string // name of a bare token
	text  string
}

// parse splits NAME:TOKEN at the first colon. Its errors describe the entry but never quote
// it, because any part of the text may be the secret.
func (e entry) parse() (Token, error) {
	name, secret := e.dflt, e.text
	if before, after, ok := strings.Cut(e.text, ":"); ok {
		name, secret = strings.TrimSpace(before), strings.TrimSpace(after)
		if !validName(name) {
			return Token{}, fmt.Errorf("the text before the first ':' is not a name (1 to %d letters, digits, '.', '_' or '-'); a token containing ':' needs a NAME: in front", maxNameLen)
		}
	}
	switch {
	case secret == "":
		return Token{}, errors.New("empty token")
	case strings.ContainsAny(secret, " \t"):
		return Token{}, errors.New("token contains a space; the format is NAME:TOKEN or TOKEN")
	case !visibleASCII(secret):
		return Token{}, errors.New("token has characters other than visible ASCII, which an HTTP header cannot carry")
	case len(secret) < MinTokenLen:
		return Token{}, fmt.Errorf("token is too weak: shorter than %d characters (generate one with: openssl rand -hex 32)", MinTokenLen)
	}
	return Token{Name: name, digest: sha256.Sum256([]byte(secret))}, nil
}

func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return false
		}
	}
	return true
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
