package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/internal/filewatch"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/redact"
)

// reloadDelay is how long a reload waits after the first change it sees in a config file's
// directory: an editor or the kubelet writes a file in several steps, and a reload half way
// would read a file half written or refuse one half renamed.
const reloadDelay = 300 * time.Millisecond

// settleDelay is how long a reload waits between its two reads of the files: only the same
// bytes twice are applied, so a writer still at work is not caught half way.
const settleDelay = 250 * time.Millisecond

// errUnsettled says the files changed between the two reads of one reload: they are being
// written, and the reload is tried again.
var errUnsettled = errors.New("the config files changed while being read: they are still being written")

// reconfigurable is a service that takes the MCP server configuration again when it is
// reloaded: the executor its servers (the api follows their rules from the executor). It takes
// them whole or refuses them whole, keeping the ones in use.
type reconfigurable interface {
	ReloadServers(servers map[string]mcpconfig.Server) error
}

// refusalReporter is a reconfigurable service that reports a reload refused before it was asked
// (the files did not read or parse) as it reports its own refusals (the executor: ListServers,
// /readyz, the reload metrics).
type refusalReporter interface{ RefuseConfig(err error) }

// reloadTarget is a reconfigurable service of this process and its target's name.
type reloadTarget struct {
	name string
	svc  reconfigurable
}

// reloader reads the MCP server configuration again (the mcpServers of --config and the
// --mcp-config file) on SIGHUP and when a file of it changes, and hands it to the
// reconfigurable services of this process. It watches the files through filewatch (their
// directories, not the files: Kubernetes swaps a mounted ConfigMap through a ..data symlink).
type reloader struct {
	configFile, mcpConfig string
	// extra are the servers that come from no file (the demo's, in `up`): every reload keeps them.
	extra map[string]mcpconfig.Server
	// targets take the servers in dependency order.
	targets []reloadTarget
	log     *slog.Logger
	delay   time.Duration
	// settle waits between the two reads of a reload (settleDelay).
	settle func()

	mu   sync.Mutex        // one reload at a time
	last [sha256.Size]byte // of the files' contents at the last attempt
	// rest is the YAML file's other keys at start: they apply only at a restart, and a
	// reload that sees them changed says so.
	rest map[string]any
}

func newReloader(cfg Config, extra map[string]mcpconfig.Server, targets []reloadTarget, log *slog.Logger) *reloader {
	r := &reloader{configFile: cfg.ConfigFile, mcpConfig: cfg.MCPConfig, extra: extra, targets: targets,
		log: log.With("component", "config reload"), delay: reloadDelay, settle: func() { time.Sleep(settleDelay) }}
	if snap, err := r.read(); err == nil {
		r.last = snap.sum()
		_, r.rest, _ = r.parse(snap)
	}
	return r
}

// snapshot is the files' contents, each read once: what is checked is what is applied.
type snapshot struct{ config, mcp []byte }

func (s snapshot) sum() [sha256.Size]byte {
	return sha256.Sum256(slices.Concat(s.config, []byte{0}, s.mcp))
}

// read reads the files: regular files of a bounded size only (mcpconfig.ReadFile).
func (r *reloader) read() (snapshot, error) {
	var s snapshot
	var err error
	if r.configFile != "" {
		if s.config, err = mcpconfig.ReadFile(r.configFile); err != nil {
			return s, fmt.Errorf("config: %w", err)
		}
	}
	if r.mcpConfig != "" {
		if s.mcp, err = mcpconfig.ReadFile(r.mcpConfig); err != nil {
			return s, fmt.Errorf("mcp config: %w", err)
		}
	}
	return s, nil
}

// readSettled reads the files twice, settle apart, and returns them only when both reads
// agree: a writer that has written part of a file (a rule key whose value is still to come)
// is not applied, it is read again later (errUnsettled).
func (r *reloader) readSettled() (snapshot, error) {
	first, err := r.read()
	if err != nil {
		return first, err
	}
	r.settle()
	second, err := r.read()
	if err != nil {
		return second, err
	}
	if first.sum() != second.sum() {
		return second, errUnsettled
	}
	return second, nil
}

func (r *reloader) files() []string {
	var out []string
	for _, f := range []string{r.configFile, r.mcpConfig} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parse reads the servers of the files' contents as Load does, and the YAML file's other keys.
func (r *reloader) parse(snap snapshot) (map[string]mcpconfig.Server, map[string]any, error) {
	c := Config{ConfigFile: r.configFile, MCPConfig: r.mcpConfig}
	var rest map[string]any
	if r.configFile != "" {
		f, err := readYAML(r.configFile, snap.config)
		if err != nil {
			return nil, nil, err
		}
		if c.servers, err = f.servers(); err != nil {
			return nil, nil, err
		}
		rest = f.doc
	}
	servers, err := c.mcpServers(snap.mcp, false)
	if err != nil {
		return nil, nil, err
	}
	// As at the start, where the demo's servers win over configured ones of the same name.
	maps.Copy(servers, r.extra)
	return servers, rest, nil
}

// reload reads the configuration again and applies it when it changed since the last reload
// (always, when force is set: SIGHUP). A configuration that does not read, parse or validate
// is refused: the servers in use are kept, and the error is logged and reported by the
// services that report refusals (the executor: ListServers, /readyz,
// toolmesh.config.reloads{result="error"}).
func (r *reloader) reload(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	snap, err := r.readSettled()
	if errors.Is(err, errUnsettled) {
		r.log.Info("the mcp server config is still being written; reading it again shortly")
		return err
	}
	if err == nil {
		// The same bytes as the last attempt, applied or refused, would end the same way.
		sum := snap.sum()
		if !force && sum == r.last {
			return nil
		}
		r.last = sum
	}
	var servers map[string]mcpconfig.Server
	var rest map[string]any
	if err == nil {
		servers, rest, err = r.parse(snap)
	}
	if err != nil {
		// The refusal is reported by /readyz and ListServers: without what the error quotes,
		// which is the file's content when the file is not what it should be (a symlink to
		// another file). The log below has it whole.
		for _, t := range r.targets {
			if rep, ok := t.svc.(refusalReporter); ok {
				rep.RefuseConfig(errors.New(redact.Quotes(err.Error())))
			}
		}
		r.log.Error("mcp server config refused; the servers in use are kept", "err", err)
		return err
	}
	for i, t := range r.targets {
		if err := t.svc.ReloadServers(servers); err != nil {
			if i == 0 {
				r.log.Error("mcp server config refused; the servers in use are kept", "by", t.name, "err", err)
				return err
			}
			// Not expected: each checks the same rules, and the first applied them.
			r.log.Error("mcp server config refused by a service after the first applied it", "service", t.name, "applied_by", r.targets[0].name, "err", err)
		}
	}
	if r.configFile != "" && !reflect.DeepEqual(rest, r.rest) {
		r.log.Warn("keys of the config file other than mcpServers changed: they apply at the next restart", "file", r.configFile)
	}
	r.rest = rest
	return nil
}

// run reloads on SIGHUP and on changes in the files' directories until ctx ends.
func (r *reloader) run(ctx context.Context) error {
	w, err := filewatch.New(r.files(), 0, r.log)
	if err != nil {
		return fmt.Errorf("config reload: watch: %w", err)
	}
	defer w.Close()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	r.log.Info("watching the mcp server config for changes (and SIGHUP)", "files", r.files())

	// The timer starts at the first change and is not pushed back by the next ones, so a
	// directory that changes all the time still reloads every delay.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			r.log.Info("SIGHUP: reading the mcp server config again")
			if err := r.reload(true); errors.Is(err, errUnsettled) && !pending {
				pending = true
				timer.Reset(r.delay)
			}
		case <-w.C:
			if !pending {
				pending = true
				timer.Reset(r.delay)
			}
		case <-timer.C:
			pending = false
			if err := r.reload(false); errors.Is(err, errUnsettled) {
				pending = true
				timer.Reset(r.delay)
			}
		}
	}
}
