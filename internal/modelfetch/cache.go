package modelfetch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/redact"
)

// EnvDir names the models folder, for every command; a flag given on the command line wins.
const EnvDir = "TOOLMESH_MODELS_DIR"

// DefaultDir is $TOOLMESH_MODELS_DIR, else the user's cache folder + toolmesh/models
// (~/.cache/toolmesh/models on Linux, ~/Library/Caches/toolmesh/models on macOS).
func DefaultDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no folder for models: %w (set %s)", err, EnvDir)
	}
	return filepath.Join(base, "toolmesh", "models"), nil
}

// Cache is a folder of verified model files: DIR/OWNER/REPO/COMMIT/FILE, each with a
// FILE.toolmesh.json manifest written once the file passed verification. A file without its
// manifest is not trusted. The manifest ties the file to its digest and to the hub it came
// from: a file only the hub's word vouched for is reused for that hub only.
type Cache struct {
	Dir string
}

const manifestSuffix = ".toolmesh.json"

// Entry is one verified model file in the cache.
type Entry struct {
	// Ref is the reference it was pulled by (its Revision as requested, e.g. a branch).
	Ref Ref `json:"-"`
	// Path is the file.
	Path string `json:"-"`

	Name     string    `json:"name,omitempty"`
	Repo     string    `json:"repo"`
	File     string    `json:"file"`
	Revision string    `json:"revision"`
	Commit   string    `json:"commit"`
	SHA256   string    `json:"sha256"`
	Size     int64     `json:"size"`
	Endpoint string    `json:"endpoint"` // the hub it came from, credentials masked
	PulledAt time.Time `json:"pulled_at"`
	// Verified says what the bytes were checked against: a digest pinned in the "registry"
	// or in the "reference" (#sha256:HEX), or only the "hub"'s word (trust on first use).
	Verified string `json:"verified_against"`
}

// Pinned reports whether the bytes were checked against a pinned digest, rather than against
// what the hub stated when they were pulled.
func (e Entry) Pinned() bool { return e.Verified == "registry" || e.Verified == "reference" }

// FilePath is where the file of repo at commit lives in the cache.
func (c Cache) FilePath(repo, commit, file string) string {
	return filepath.Join(c.Dir, filepath.FromSlash(repo), commit, filepath.FromSlash(file))
}

// Lookup finds the verified file for r: for a pinned reference the file of that commit, for a
// branch or tag the newest file pulled by that name. When r pins a digest, a file with that
// digest is good whatever hub it came from; otherwise only the hub's word vouched for the
// file, and it is reused only for that hub (hub, as Fetcher.Hub gives it; credentials do not
// count). It trusts the manifest and checks only the size, so a 4 GB model is not hashed again
// on every start.
func (c Cache) Lookup(r Ref, hub string) (Entry, bool, error) {
	if r.Local() {
		return Entry{}, false, errors.New("a local file is not in the cache")
	}
	var dirs []string
	if r.Pinned() {
		dirs = []string{r.Revision}
	} else {
		all, err := os.ReadDir(filepath.Join(c.Dir, filepath.FromSlash(r.Repo)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Entry{}, false, err
		}
		for _, d := range all {
			if d.IsDir() && commitID.MatchString(d.Name()) {
				dirs = append(dirs, d.Name())
			}
		}
	}
	var best Entry
	found := false
	for _, commit := range dirs {
		e, ok, err := c.entry(c.FilePath(r.Repo, commit, r.File))
		if err != nil {
			return Entry{}, false, err
		}
		switch {
		case !ok, !r.Pinned() && e.Revision != r.Revision, r.Size > 0 && e.Size != r.Size:
			continue
		case r.SHA256 != "" && e.SHA256 != r.SHA256:
			continue
		case r.SHA256 == "" && endpointKey(e.Endpoint) != endpointKey(hub):
			continue
		}
		if !found || e.PulledAt.After(best.PulledAt) {
			best, found = e, true
		}
	}
	if found {
		best.Ref = r
	}
	return best, found, nil
}

// entry reads the manifest of the file at p; ok is false when either is missing or the
// file's size is not the manifest's.
func (c Cache) entry(p string) (Entry, bool, error) {
	data, err := os.ReadFile(p + manifestSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, false, fmt.Errorf("%s: %w", p+manifestSuffix, err)
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != e.Size {
		return Entry{}, false, nil
	}
	e.Path = p
	e.Endpoint = redact.URL(e.Endpoint) // a manifest written before endpoints were masked
	e.Ref = Ref{Name: e.Name, Repo: e.Repo, File: e.File, Revision: e.Revision}
	if e.Pinned() {
		// Only a pinned digest goes in the reference: one the hub stated would read as pinned.
		e.Ref.SHA256 = e.SHA256
	}
	return e, true, nil
}

// endpointKey is a hub's URL as the cache compares it: without credentials (a token in
// HF_ENDPOINT changes nothing about the bytes), a trailing slash, or case in scheme and host.
func endpointKey(s string) string {
	s = strings.TrimRight(s, "/")
	u, err := url.Parse(s)
	if err != nil {
		return redact.URL(s)
	}
	u.User = nil
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	return u.String()
}

// Verify hashes the file of e again and compares it with its manifest: for when a pin is
// taken from it, since Lookup trusts the manifest.
func (c Cache) Verify(e Entry) error {
	f, err := os.Open(e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("reading %s: %w", e.Path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != e.SHA256 || n != e.Size {
		return fmt.Errorf("%s: %w: the file has %d bytes with sha256 %s, its manifest says %d bytes with sha256 %s; remove it (toolmesh model rm) and pull again",
			e.Path, ErrIntegrity, n, got, e.Size, e.SHA256)
	}
	return nil
}

// writeManifest records a verified file; it is written to a temporary name and renamed, so a
// reader never sees half of it.
func (c Cache) writeManifest(e Entry) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	tmp := e.Path + manifestSuffix + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, e.Path+manifestSuffix)
}

// List returns every verified file in the cache, by name then path.
func (c Cache) List() ([]Entry, error) {
	var out []Entry
	err := c.walk(manifestSuffix, func(p string, _ fs.DirEntry) error {
		e, ok, err := c.entry(strings.TrimSuffix(p, manifestSuffix))
		if err != nil || !ok {
			return err
		}
		out = append(out, e)
		return nil
	})
	slices.SortFunc(out, func(a, b Entry) int {
		return strings.Compare(entryName(a)+"\x00"+a.Path, entryName(b)+"\x00"+b.Path)
	})
	return out, err
}

// Partial is a download that did not finish: FILE.part, which the next pull of Ref resumes.
type Partial struct {
	// Ref pulls (and resumes) it: the registry name when the registry pins that file, else
	// hf://OWNER/REPO/FILE@COMMIT.
	Ref Ref
	// Path is the .part file; Size the bytes it holds so far.
	Path string
	Size int64
}

// Partials lists the downloads left unfinished in the cache (cut, stopped by their deadline,
// or interrupted): they take disk space, and `model ls` says how to resume or remove them.
func (c Cache) Partials() ([]Partial, error) {
	var out []Partial
	err := c.walk(partSuffix, func(p string, d fs.DirEntry) error {
		rel, err := filepath.Rel(c.Dir, strings.TrimSuffix(p, partSuffix))
		if err != nil {
			return err
		}
		// OWNER/REPO/COMMIT/FILE: anything else is not ours.
		parts := strings.SplitN(filepath.ToSlash(rel), "/", 4)
		if len(parts) != 4 || !commitID.MatchString(parts[2]) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		r := Ref{Repo: parts[0] + "/" + parts[1], Revision: parts[2], File: parts[3]}
		for _, k := range registry {
			if k.Repo == r.Repo && k.File == r.File && k.Revision == r.Revision {
				r = k.Ref()
			}
		}
		out = append(out, Partial{Ref: r, Path: p, Size: fi.Size()})
		return nil
	})
	return out, err
}

// walk calls fn for every file of the cache whose name ends in suffix; a cache folder that
// does not exist yet holds none.
func (c Cache) walk(suffix string, fn func(p string, d fs.DirEntry) error) error {
	return filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == c.Dir {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(p, suffix) {
			return err
		}
		return fn(p, d)
	})
}

func entryName(e Entry) string {
	if e.Name != "" {
		return e.Name
	}
	return e.Ref.String()
}

// Remove deletes the files of r (every commit pulled by that name, for a branch or tag) with
// their manifests and any partial download, and the folders left empty. It returns the
// model files and partial downloads removed.
func (c Cache) Remove(r Ref) ([]string, error) {
	if r.Local() {
		return nil, fmt.Errorf("%s is a local file, not a cached model: delete it yourself", r.Path)
	}
	var files []string
	var commits []string
	if r.Pinned() {
		commits = []string{r.Revision}
	} else {
		entries, err := c.List()
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Repo == r.Repo && e.File == r.File && e.Revision == r.Revision {
				commits = append(commits, e.Commit)
			}
		}
	}
	var errs []error
	for _, commit := range commits {
		p := c.FilePath(r.Repo, commit, r.File)
		for _, f := range []string{p, p + partSuffix} {
			if _, err := os.Stat(f); err == nil {
				files = append(files, f)
			}
		}
		for _, f := range []string{p, p + manifestSuffix, p + partSuffix, p + lockSuffix} {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		c.pruneEmpty(filepath.Dir(p))
	}
	return files, errors.Join(errs...)
}

// pruneEmpty removes dir and its parents up to the cache folder while they are empty.
func (c Cache) pruneEmpty(dir string) {
	root := filepath.Clean(c.Dir)
	for dir = filepath.Clean(dir); dir != root && strings.HasPrefix(dir, root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}
