package modelfetch

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Ref says which model file to run: a file on a hub at a revision (from the registry or an
// hf:// reference), or a local GGUF file (Path set; nothing to fetch or verify).
type Ref struct {
	// Name is the registry name, when the reference came from the registry.
	Name string
	// Repo ("OWNER/REPO"), File (a path inside the repository) and Revision (a commit id, or
	// a branch or tag that is resolved to one when pulled).
	Repo, File, Revision string
	// SHA256 is the expected SHA-256 in lowercase hex, or "" to take the hub's for Revision.
	SHA256 string
	// Size is the expected size in bytes, or 0 to take the hub's.
	Size int64
	// Path is a local GGUF file; the other fields are then empty.
	Path string
}

// Scheme prefixes a hub reference: hf://OWNER/REPO/FILE@REVISION[#sha256:HEX].
const Scheme = "hf://"

var (
	repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	commitID = regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha256ID = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ParseRef reads a registry name, an hf://OWNER/REPO/FILE@REVISION reference (optionally
// followed by #sha256:HEX) or the path of a local .gguf file. Errors say which form was
// expected and what is wrong with the input.
func ParseRef(s string) (Ref, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Ref{}, errors.New("empty model reference")
	case strings.HasPrefix(s, Scheme):
		return parseHub(s)
	}
	if k, ok := Lookup(s); ok {
		return k.Ref(), nil
	}
	if strings.HasSuffix(strings.ToLower(s), ".gguf") {
		abs, err := filepath.Abs(s)
		if err != nil {
			return Ref{}, fmt.Errorf("model file %q: %w", s, err)
		}
		return Ref{Path: abs}, nil
	}
	return Ref{}, fmt.Errorf("unknown model %q: give a known model (%s), %sOWNER/REPO/FILE@REVISION, or a .gguf file",
		s, strings.Join(Names(), ", "), Scheme)
}

func parseHub(s string) (Ref, error) {
	rest := strings.TrimPrefix(s, Scheme)
	var r Ref
	if body, frag, ok := strings.Cut(rest, "#"); ok {
		rest = body
		hex, ok := strings.CutPrefix(frag, "sha256:")
		hex = strings.ToLower(hex)
		if !ok || !sha256ID.MatchString(hex) {
			return Ref{}, fmt.Errorf("%s: after # want sha256: and 64 hex digits, got %q", s, frag)
		}
		r.SHA256 = hex
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return Ref{}, fmt.Errorf("%s: no @REVISION: pin a commit id (…@<40 hex digits>) so the bytes cannot change, or say @main to take whatever is there now", s)
	}
	rest, r.Revision = rest[:at], rest[at+1:]
	if r.Revision == "" || strings.ContainsAny(r.Revision, " \t\r\n?#") || strings.Contains(r.Revision, "..") {
		return Ref{}, fmt.Errorf("%s: revision %q is not a commit id, branch or tag", s, r.Revision)
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 {
		return Ref{}, fmt.Errorf("%s: want %sOWNER/REPO/FILE@REVISION", s, Scheme)
	}
	for _, p := range parts[:2] {
		if !repoPart.MatchString(p) {
			return Ref{}, fmt.Errorf("%s: %q is not a valid owner or repository name", s, p)
		}
	}
	r.Repo = parts[0] + "/" + parts[1]
	r.File = parts[2]
	if clean := path.Clean(r.File); clean != r.File || strings.HasPrefix(r.File, "/") || strings.HasPrefix(clean, "..") || r.File == "." {
		return Ref{}, fmt.Errorf("%s: file %q is not a clean path inside the repository", s, r.File)
	}
	if !strings.HasSuffix(strings.ToLower(r.File), ".gguf") {
		return Ref{}, fmt.Errorf("%s: file %q is not a .gguf file (llama-server loads GGUF)", s, r.File)
	}
	// A known model named by its hub coordinates keeps its pins.
	for _, k := range registry {
		if k.Repo == r.Repo && k.File == r.File && k.Revision == r.Revision {
			if r.SHA256 == "" {
				r.SHA256 = k.SHA256
			}
			r.Size = k.Size
		}
	}
	return r, nil
}

// Local reports whether the reference is a local file.
func (r Ref) Local() bool { return r.Path != "" }

// Pinned reports whether Revision is a commit id (a branch or tag can move).
func (r Ref) Pinned() bool { return commitID.MatchString(r.Revision) }

// String is the reference as a user types it: the registry name, the hf:// form, or the path.
func (r Ref) String() string {
	switch {
	case r.Local():
		return r.Path
	case r.Name != "":
		return r.Name
	}
	s := Scheme + r.Repo + "/" + r.File + "@" + r.Revision
	if r.SHA256 != "" {
		s += "#sha256:" + r.SHA256
	}
	return s
}

// DisplayName names the model in logs, spans and listings: the registry name, else the
// file's name without its .gguf suffix.
func (r Ref) DisplayName() string {
	if r.Name != "" {
		return r.Name
	}
	base := path.Base(filepath.ToSlash(r.File))
	if r.Local() {
		base = filepath.Base(r.Path)
	}
	if i := strings.LastIndex(strings.ToLower(base), ".gguf"); i > 0 {
		base = base[:i]
	}
	return base
}
