package llamaserver

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// Flags are the settings of a llama-server that a service runs itself, bound to its flags.
type Flags struct {
	// Bin is the llama-server executable ("" = llama-server on PATH).
	Bin string
	// GPULayers is -ngl: auto, a number, or "" for llama-server's default.
	GPULayers string
	// ModelsDir is the model cache. The flag's empty default is filled by the composition
	// root (modelfetch.DefaultDir: $TOOLMESH_MODELS_DIR, else the user's cache folder), which reads
	// the environment once; here it is required.
	ModelsDir string
	// Hub is where models are pulled from and with what token (HF_ENDPOINT, HF_TOKEN), read
	// from the environment by the composition root, never here.
	Hub modelfetch.Hub
}

// RegisterFlags binds the flags prefix+"server-bin", prefix+"gpu-layers" and
// prefix+"models-dir"; gpuLayers is the default of the second.
func (f *Flags) RegisterFlags(fs *flag.FlagSet, prefix, gpuLayers string) {
	fs.StringVar(&f.Bin, prefix+"server-bin", "", "llama-server executable toolmesh runs for the model (default: llama-server on PATH)")
	fs.StringVar(&f.GPULayers, prefix+"gpu-layers", gpuLayers, "llama-server -ngl: auto (every layer when llama-server lists a GPU), a number, or empty for llama-server's default")
	fs.StringVar(&f.ModelsDir, prefix+"models-dir", "", "model cache folder (default: $"+modelfetch.EnvDir+", else the user's cache folder + toolmesh/models)")
}

// Validate checks the values; prefix names the flags in errors.
func (f Flags) Validate(prefix string) error {
	switch f.GPULayers {
	case "", "auto":
	default:
		if n, err := strconv.Atoi(f.GPULayers); err != nil || n < 0 {
			return fmt.Errorf("%sgpu-layers: %q is not auto, empty or a number of layers", prefix, f.GPULayers)
		}
	}
	return nil
}

// Cache is the model cache the flags name.
func (f Flags) Cache() (modelfetch.Cache, error) {
	if f.ModelsDir == "" {
		return modelfetch.Cache{}, fmt.Errorf("no models folder (set %s)", modelfetch.EnvDir)
	}
	return modelfetch.Cache{Dir: f.ModelsDir}, nil
}

// FromCache is the ModelFunc of ref: a local file as it is, a verified file of the cache at
// once, anything else pulled from hub with its progress reported and logged. Failures a retry will not fix (a checksum or revision mismatch, no access, a
// missing local file) are Permanent.
func FromCache(ref modelfetch.Ref, c modelfetch.Cache, hub modelfetch.Hub, logger *slog.Logger) ModelFunc {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	announced := false // the supervisor calls it again after a failure, and logs that itself
	return func(ctx context.Context, report func(string)) (string, error) {
		f := hub.Fetcher(logger)
		if !ref.Local() {
			if e, ok, err := c.Lookup(ref, f.Hub()); err == nil && ok {
				return e.Path, nil
			}
			report("pulling " + ref.String())
			if !announced {
				announced = true
				logger.Info("pulling the model; it is verified before llama-server starts", "model", ref.String(), "hub", f.Hub(), "into", c.Dir)
			}
		}
		logged := modelfetch.LogProgress(logger, 10*time.Second)
		f.Progress = func(p modelfetch.Progress) {
			report("downloading " + p.String())
			logged(p)
		}
		path, err := modelfetch.Ensure(ctx, f, c, ref)
		switch {
		case err == nil:
			return path, nil
		case ref.Local(), modelfetch.Permanent(err):
			return "", Permanent(err)
		}
		return "", err
	}
}
