package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// TestComposeServices: the default `docker compose up` runs the whole mesh, and the optional
// embeddings server only with its profile.
func TestComposeServices(t *testing.T) {
	p := loadProject(t, []string{composeFile}, nil, nil)
	want := []string{"api", "calculator", "converter", "executor", "inference", "jaeger", "llama-server", "model-init", "qdrant", "retriever"}
	if got := sortedNames(p.Services); !slices.Equal(got, want) {
		t.Errorf("services of `docker compose up` = %v, want %v", got, want)
	}
	if got := sortedNames(p.DisabledServices); !slices.Equal(got, []string{"llama-embed", "model-init-embed"}) {
		t.Errorf("services behind a profile = %v, want [llama-embed model-init-embed]", got)
	}
}

// TestComposeNoOpenAPI: a plain `docker compose up` (no TOOLMESH_API_TOKENS) does not put an api
// without tokens on the network: every port any service publishes is bound to the host's
// loopback, in the CPU variant too. And the api, which listens on every interface of its
// container, starts that way only because it says so (--api.allow-open): without it, it would
// refuse to start without tokens.
func TestComposeNoOpenAPI(t *testing.T) {
	// The CPU variant needs its chat server named; nothing else is set.
	chat := map[string]string{"TOOLMESH_CHAT_URL": "http://x", "TOOLMESH_CHAT_MODEL": "m"}
	for _, files := range [][]string{{composeFile}, {composeFile, "deploy/compose.cpu.yaml"}} {
		p := loadProject(t, files, []string{"*"}, chat)
		for _, name := range sortedNames(p.Services) {
			for _, port := range p.Services[name].Ports {
				if ip := net.ParseIP(port.HostIP); ip == nil || !ip.IsLoopback() {
					t.Errorf("%v: service %s publishes port %d on %q, want 127.0.0.1 (no open api without tokens)", files, name, port.Target, port.HostIP)
				}
			}
		}
		api := serveServices(t, p)["api"]
		if tokens := api.Environment["TOOLMESH_API_TOKENS"]; tokens != nil && *tokens != "" {
			continue // tokens by default: nothing is open
		}
		cfg := serveConfig(t, api)
		if !cfg.API.AllowOpen {
			t.Errorf("%v: the api listens on %s without tokens but without --api.allow-open: it would refuse to start", files, cfg.API.HTTPAddr)
		}
	}
}

// TestComposeHealthGating: every long-running service has a health check, and every
// dependency waits for it (service_healthy), so the api starts only once the mesh is ready.
// A one-shot service (restart "no") has nothing to check while it runs: its dependents wait
// for it to finish successfully instead.
func TestComposeHealthGating(t *testing.T) {
	p := loadProject(t, []string{composeFile}, []string{"*"}, nil)
	oneShot := func(name string) bool {
		s, ok := p.Services[name]
		return ok && s.Restart == types.RestartPolicyNo
	}
	for _, name := range sortedNames(p.Services) {
		svc := p.Services[name]
		if !oneShot(name) {
			hc := svc.HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) < 2 || (hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL") {
				t.Errorf("service %s: no health check (healthcheck %+v)", name, hc)
			}
		}
		for dep, cfg := range svc.DependsOn {
			want := types.ServiceConditionHealthy
			if oneShot(dep) {
				want = types.ServiceConditionCompletedSuccessfully
			}
			if cfg.Condition != want {
				t.Errorf("service %s: depends_on %s with condition %q, want %q", name, dep, cfg.Condition, want)
			}
		}
	}
	api := p.Services["api"]
	for _, dep := range []string{"executor", "retriever", "inference"} {
		if _, ok := api.DependsOn[dep]; !ok {
			t.Errorf("api does not wait for %s", dep)
		}
	}
	if got := api.HealthCheck.Test; !slices.Contains(got, "http://127.0.0.1:7700/readyz") {
		t.Errorf("api health check %v, want it to ask /readyz", got)
	}
}

// TestComposeOneImage: the four toolmesh services are one image (built from the repository's
// Dockerfile) with the four targets; the shipped MCP servers run from it too.
func TestComposeOneImage(t *testing.T) {
	p := loadProject(t, []string{composeFile}, []string{"*"}, nil)
	root := repoRoot(t)
	byTarget := serveServices(t, p)
	var got []string
	for tg := range byTarget {
		got = append(got, tg)
	}
	slices.Sort(got)
	if !slices.Equal(got, serveTargets) {
		t.Fatalf("serve targets in compose.yaml = %v, want %v", got, serveTargets)
	}
	image := byTarget["api"].Image
	for _, name := range []string{"api", "executor", "inference", "retriever", "calculator", "converter", "model-init", "model-init-embed"} {
		svc := p.Services[name]
		if name == "calculator" || name == "converter" {
			if len(svc.Command) < 2 || svc.Command[0] != "mcp" || svc.Command[1] != name {
				t.Errorf("service %s: command %v, want toolmesh mcp %s", name, svc.Command, name)
			}
		}
		if svc.Image != image {
			t.Errorf("service %s: image %q, want the toolmesh image %q", name, svc.Image, image)
		}
		if svc.Build == nil || svc.Build.Context != root || svc.Build.Dockerfile != "Dockerfile" {
			t.Errorf("service %s: build %+v, want the repository's Dockerfile", name, svc.Build)
		}
		if svc.HealthCheck != nil && len(svc.HealthCheck.Test) > 1 && svc.HealthCheck.Test[1] != "toolmesh-healthcheck" {
			t.Errorf("service %s: health check %v, want the image's toolmesh-healthcheck (no shell, curl or wget in it)", name, svc.HealthCheck.Test)
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/toolmesh", "-o /out/toolmesh-healthcheck ./deploy/healthcheck", "USER 65532", "HEALTHCHECK",
		"--chown=65532:65532 /out/models /models", "--chown=65532:65532 /out/tls /tls"} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("Dockerfile does not contain %q", want)
		}
	}
}

// TestComposeGPU: the GPU is reserved for llama-server alone, which runs Gorilla from the
// models volume with explicit --host/--port, -c, -np, -ngl and --metrics.
func TestComposeGPU(t *testing.T) {
	p := loadProject(t, []string{composeFile}, []string{"*"}, nil)
	for _, name := range sortedNames(p.Services) {
		svc := p.Services[name]
		has := svc.Deploy != nil && svc.Deploy.Resources.Reservations != nil && len(svc.Deploy.Resources.Reservations.Devices) > 0
		if has != (name == "llama-server") {
			t.Errorf("service %s: device reservation %v, want one on llama-server only", name, has)
		}
	}
	llama := p.Services["llama-server"]
	if llama.Deploy == nil || llama.Deploy.Resources.Reservations == nil {
		t.Fatal("llama-server reserves no devices")
	}
	dev := llama.Deploy.Resources.Reservations.Devices[0]
	if dev.Driver != "nvidia" || !slices.Contains(dev.Capabilities, "gpu") || dev.Count < 1 {
		t.Errorf("llama-server reserves %+v, want an nvidia device with the gpu capability", dev)
	}
	if !strings.Contains(llama.Image, "llama.cpp:server-cuda") {
		t.Errorf("llama-server image %q, want llama.cpp's CUDA server image", llama.Image)
	}
	args := llama.Command
	for _, f := range []string{"host", "port", "c", "np", "ngl", "m"} {
		if _, ok := flagValue(args, f); !ok {
			t.Errorf("llama-server command %v lacks -%s", args, f)
		}
	}
	if !slices.Contains(args, "--metrics") {
		t.Errorf("llama-server command %v lacks --metrics", args)
	}
	host, _ := flagValue(args, "host")
	if host != "0.0.0.0" {
		t.Errorf("llama-server --host %q, want 0.0.0.0 (reachable from the inference container)", host)
	}
	ctx, _ := flagValue(args, "c")
	np, _ := flagValue(args, "np")
	c, err1 := strconv.Atoi(ctx)
	n, err2 := strconv.Atoi(np)
	if err1 != nil || err2 != nil || n < 1 || c != n*gorillaContext {
		t.Errorf("llama-server -c %s -np %s: want -c = -np × %d, so that every slot has Gorilla's whole context", ctx, np, gorillaContext)
	}
	port, _ := flagValue(args, "port")
	if !slices.Contains(llama.HealthCheck.Test, "http://127.0.0.1:"+port+"/health") {
		t.Errorf("llama-server health check %v does not ask /health on --port %s", llama.HealthCheck.Test, port)
	}
}

// sharesVolume says whether writer mounts a named volume read-write at target and reader the
// same volume read-only there.
func sharesVolume(writer, reader types.ServiceConfig, target string) bool {
	for _, w := range writer.Volumes {
		for _, r := range reader.Volumes {
			if w.Type == types.VolumeTypeVolume && w.Source == r.Source && w.Target == target && r.Target == target && !w.ReadOnly && r.ReadOnly {
				return true
			}
		}
	}
	return false
}

// TestComposeMountsExist: every file compose.yaml (and the CPU override) mounts or reads is
// in the repository.
func TestComposeMountsExist(t *testing.T) {
	root := repoRoot(t)
	for _, files := range [][]string{{composeFile}, {composeFile, cpuOverride}} {
		p := loadProject(t, files, []string{"*"}, map[string]string{"TOOLMESH_CHAT_URL": "http://x", "TOOLMESH_CHAT_MODEL": "m"})
		for _, name := range sortedNames(p.Services) {
			svc := p.Services[name]
			for _, v := range svc.Volumes {
				if v.Type != types.VolumeTypeBind {
					continue
				}
				checkInRepo(t, root, name, v.Source)
				if !v.ReadOnly {
					t.Errorf("service %s: %s is mounted read-write", name, v.Source)
				}
			}
			for _, f := range svc.EnvFiles {
				checkInRepo(t, root, name, f.Path)
			}
			if svc.Build != nil {
				checkInRepo(t, root, name, filepath.Join(svc.Build.Context, svc.Build.Dockerfile))
			}
		}
	}
}

func checkInRepo(t *testing.T, root, service, path string) {
	t.Helper()
	rel, err := filepath.Rel(root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Errorf("service %s: %s is outside the repository", service, path)
		return
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		t.Errorf("service %s: mounts %s, which is not a file in the repository (%v)", service, rel, err)
	}
}

// TestComposeAgreesWithToolmeshConfig loads the toolmesh config each serve service runs with
// (deploy/toolmesh.yaml and deploy/mcp.json, as mounted) and checks that what it listens on and
// what it dials are the ports compose gives those services.
func TestComposeAgreesWithToolmeshConfig(t *testing.T) {
	p := loadProject(t, []string{composeFile}, []string{"*"}, nil)
	byTarget := serveServices(t, p)
	listenPort := map[string]string{}
	for _, tg := range serveTargets {
		svc := byTarget[tg]
		cfg := serveConfig(t, svc)
		if err := cfg.Validate(); err != nil {
			t.Errorf("service %s: the config it runs with is invalid: %v", svc.Name, err)
		}
		// What the target listens on, and the port its health check asks.
		var listen string
		switch tg {
		case "executor":
			listen = cfg.Executor.GRPCAddr
		case "retriever":
			listen = cfg.Retriever.GRPCAddr
		case "inference":
			listen = cfg.Inference.GRPCAddr
		case "api":
			listen = cfg.API.GRPCAddr
			host, port := splitAddr(t, "api.http-addr", cfg.API.HTTPAddr)
			if host != "0.0.0.0" || !slices.Contains(exposed(svc), port) {
				t.Errorf("api.http-addr %s: want 0.0.0.0 and a port the api service publishes (%v)", cfg.API.HTTPAddr, exposed(svc))
			}
			if !slices.Contains(svc.HealthCheck.Test, "http://127.0.0.1:"+port+"/readyz") {
				t.Errorf("api health check %v does not ask /readyz on api.http-addr's port %s", svc.HealthCheck.Test, port)
			}
			_, grpcPort := splitAddr(t, "api.grpc-addr", cfg.API.GRPCAddr)
			if !slices.Contains(exposed(svc), grpcPort) {
				t.Errorf("api.grpc-addr %s: port not published by the api service (%v)", cfg.API.GRPCAddr, exposed(svc))
			}
		}
		host, port := splitAddr(t, tg+" listen address", listen)
		if host != "0.0.0.0" || !slices.Contains(exposed(svc), port) {
			t.Errorf("service %s listens on %s: want 0.0.0.0 and a port it exposes (%v), or the other containers cannot reach it", svc.Name, listen, exposed(svc))
		}
		if svc.StopGracePeriod == nil || time.Duration(*svc.StopGracePeriod) <= cfg.DrainTimeout {
			t.Errorf("service %s: stop_grace_period %v, want more than its drain-timeout %s", svc.Name, svc.StopGracePeriod, cfg.DrainTimeout)
		}
		mhost, mport := splitAddr(t, "metrics-addr", cfg.MetricsAddr)
		if mhost != "0.0.0.0" || !slices.Contains(exposed(svc), mport) {
			t.Errorf("service %s: metrics-addr %s, want 0.0.0.0 and a port it exposes (%v)", svc.Name, cfg.MetricsAddr, exposed(svc))
		}
		if tg != "api" && !slices.Contains(svc.HealthCheck.Test, "127.0.0.1:"+port) {
			t.Errorf("service %s: health check %v does not ask its gRPC port %s", svc.Name, svc.HealthCheck.Test, port)
		}
		listenPort[svc.Name] = port
	}

	// Every address a target dials is a compose service and a port that service listens on.
	dials := func(what, addr, wantService string) {
		t.Helper()
		host, port := splitAddr(t, what, addr)
		if host != wantService {
			t.Errorf("%s = %s: want the %s service", what, addr, wantService)
			return
		}
		if lp, ok := listenPort[wantService]; ok {
			if lp != port {
				t.Errorf("%s = %s, but %s listens on port %s", what, addr, wantService, lp)
			}
			return
		}
		svc, ok := p.Services[wantService]
		if !ok {
			t.Errorf("%s = %s: no service %s in compose.yaml", what, addr, wantService)
			return
		}
		if !slices.Contains(exposed(svc), port) {
			t.Errorf("%s = %s, but %s exposes %v", what, addr, wantService, exposed(svc))
		}
	}
	api := serveConfig(t, byTarget["api"])
	dials("api.executor-addr", api.API.ExecutorAddr, "executor")
	dials("api.retriever-addr", api.API.RetrieverAddr, "retriever")
	dials("api.inference-addr", api.API.InferenceAddr, "inference")
	ret := serveConfig(t, byTarget["retriever"])
	dials("retriever.executor-addr", ret.Retriever.ExecutorAddr, "executor")
	if ret.Retriever.Store != "qdrant" {
		t.Errorf("retriever.store = %q, want qdrant", ret.Retriever.Store)
	}
	dials("retriever.qdrant.addr", ret.Retriever.QdrantAddr, "qdrant")
	if _, port := splitAddr(t, "retriever.qdrant.addr", ret.Retriever.QdrantAddr); port != "6334" {
		t.Errorf("retriever.qdrant.addr port %s, want Qdrant's gRPC port 6334", port)
	}
	dials("retriever.embed.url", hostPort(t, ret.Retriever.EmbedURL), "llama-embed")
	embed := p.Services["llama-embed"]
	if port, _ := flagValue(embed.Command, "port"); port != portOf(t, ret.Retriever.EmbedURL) {
		t.Errorf("retriever.embed.url %s, but llama-embed --port %s", ret.Retriever.EmbedURL, port)
	}
	inf := serveConfig(t, byTarget["inference"])
	if inf.Inference.Backend != "gorilla" {
		t.Errorf("inference.backend = %q, want gorilla", inf.Inference.Backend)
	}
	dials("inference.llm.url", hostPort(t, inf.Inference.LLM.URL), "llama-server")
	if port, _ := flagValue(p.Services["llama-server"].Command, "port"); port != portOf(t, inf.Inference.LLM.URL) {
		t.Errorf("inference.llm.url %s, but llama-server --port %s", inf.Inference.LLM.URL, port)
	}
	for _, tg := range serveTargets {
		cfg := serveConfig(t, byTarget[tg])
		dials(tg+": otel.endpoint", cfg.Telemetry.Endpoint, "jaeger")
		if _, port := splitAddr(t, "otel.endpoint", cfg.Telemetry.Endpoint); port != "4317" {
			t.Errorf("otel.endpoint port %s, want OTLP/gRPC's 4317", port)
		}
	}

	// The executor's MCP servers: each URL is a compose service serving that transport on that port.
	exe := serveConfig(t, byTarget["executor"])
	if len(exe.Executor.Servers) == 0 {
		t.Fatal("the executor has no MCP servers")
	}
	var stdio int
	for _, name := range mcpconfig.Names(exe.Executor.Servers) {
		s := exe.Executor.Servers[name]
		if s.Transport == mcpconfig.TransportStdio {
			stdio++
			if s.Command != "toolmesh" || len(s.Args) < 2 || s.Args[0] != "mcp" {
				t.Errorf("mcp server %s: %s %v, want a `toolmesh mcp` server the executor starts from its own image", name, s.Command, s.Args)
			}
			continue
		}
		u, err := url.Parse(s.URL)
		if err != nil {
			t.Fatalf("mcp server %s: %v", name, err)
		}
		svc, ok := p.Services[u.Hostname()]
		if !ok {
			t.Errorf("mcp server %s: %s is not a compose service", name, s.URL)
			continue
		}
		addr, _ := flagValue(svc.Command, "addr")
		transport, _ := flagValue(svc.Command, "transport")
		host, port := splitAddr(t, svc.Name+" --addr", addr)
		if host != "0.0.0.0" || port != u.Port() || string(s.Transport) != transport || !slices.Contains(exposed(svc), port) {
			t.Errorf("mcp server %s at %s (%s), but service %s runs --transport %s --addr %s", name, s.URL, s.Transport, svc.Name, transport, addr)
		}
		if s.Transport == mcpconfig.TransportSSE && u.Path != "/sse" {
			t.Errorf("mcp server %s: SSE URL path %q, want /sse", name, u.Path)
		}
		if _, waits := byTarget["executor"].DependsOn[svc.Name]; !waits {
			t.Errorf("the executor does not wait for MCP server %s", svc.Name)
		}
	}
	if stdio == 0 {
		t.Error("no stdio MCP server is wired through the executor")
	}
}

func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		t.Fatalf("%q is not a URL with a port: %v", raw, err)
	}
	return u.Host
}

func portOf(t *testing.T, raw string) string {
	t.Helper()
	_, port := splitAddr(t, raw, hostPort(t, raw))
	return port
}

// TestComposeEnvironment: every TOOLMESH_* variable compose gives a toolmesh service is one
// that toolmesh reads (a renamed variable would silently stop working), and the secrets reach
// the services that read them.
func TestComposeEnvironment(t *testing.T) {
	p := loadProject(t, []string{composeFile}, []string{"*"}, nil)
	read := toolmeshEnvNames(t)
	for _, name := range sortedNames(p.Services) {
		for k := range p.Services[name].Environment {
			if strings.HasPrefix(k, "TOOLMESH_") && !read[k] {
				t.Errorf("service %s gets %s, which no toolmesh code reads", name, k)
			}
		}
	}
	byTarget := serveServices(t, p)
	for tg, vars := range map[string][]string{
		"api":       {"TOOLMESH_API_TOKENS"},
		"retriever": {"TOOLMESH_QDRANT_API_KEY", "TOOLMESH_EMBED_API_KEY"},
		"inference": {"TOOLMESH_LLM_API_KEY"},
	} {
		for _, v := range vars {
			if !read[v] {
				t.Errorf("%s: no toolmesh code reads it any more", v)
			}
			if _, ok := byTarget[tg].Environment[v]; !ok {
				t.Errorf("service %s does not get %s", byTarget[tg].Name, v)
			}
		}
	}
}

var envNamePattern = regexp.MustCompile(`"(TOOLMESH_[A-Z0-9_]+)"`)

// toolmeshEnvNames lists the TOOLMESH_* names quoted in the Go code the toolmesh binary and
// its health check are built from (test files excluded).
func toolmeshEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	root := repoRoot(t)
	out := map[string]bool{}
	for _, dir := range []string{"cmd", "internal", "services", "mcpservers", "deploy/healthcheck"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range envNamePattern.FindAllStringSubmatch(string(src), -1) {
				out[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestComposeProfiles: the embeddings profile adds llama-embed and the retriever waits for it
// (but does not need it otherwise); the CPU override turns the GPU services off and points
// inference at an OpenAI-compatible server.
func TestComposeProfiles(t *testing.T) {
	p := loadProject(t, []string{composeFile}, []string{"embeddings"}, map[string]string{"TOOLMESH_EMBEDDER": "http"})
	if _, ok := p.Services["llama-embed"]; !ok {
		t.Fatal("--profile embeddings does not start llama-embed")
	}
	ret := serveServices(t, p)["retriever"]
	if dep, ok := ret.DependsOn["llama-embed"]; !ok || dep.Required {
		t.Errorf("retriever depends_on llama-embed = %+v (present %v), want an optional dependency", dep, ok)
	}
	cfg := serveConfig(t, ret)
	if cfg.Retriever.Embedder != "http" {
		t.Errorf("with TOOLMESH_EMBEDDER=http the retriever runs --retriever.embedder=%s", cfg.Retriever.Embedder)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("retriever with the http embedder: %v", err)
	}

	env := map[string]string{"TOOLMESH_CHAT_URL": "http://host.docker.internal:11434/v1", "TOOLMESH_CHAT_MODEL": "qwen2.5:7b"}
	cpu := loadProject(t, []string{composeFile, cpuOverride}, nil, env)
	for _, name := range []string{"llama-server", "model-init"} {
		if _, on := cpu.Services[name]; on {
			t.Errorf("CPU variant: %s still runs", name)
		}
	}
	for _, name := range sortedNames(cpu.Services) {
		svc := cpu.Services[name]
		if svc.Deploy != nil && svc.Deploy.Resources.Reservations != nil && len(svc.Deploy.Resources.Reservations.Devices) > 0 {
			t.Errorf("CPU variant: service %s reserves devices", name)
		}
	}
	inf := serveServices(t, cpu)["inference"]
	if _, ok := inf.DependsOn["llama-server"]; ok {
		t.Error("CPU variant: inference still waits for llama-server")
	}
	icfg := serveConfig(t, inf)
	if icfg.Inference.Backend != "openai" || icfg.Inference.ChatURL != env["TOOLMESH_CHAT_URL"] || icfg.Inference.ChatModel != env["TOOLMESH_CHAT_MODEL"] {
		t.Errorf("CPU variant: inference backend %q, chat url %q, model %q; want openai at $TOOLMESH_CHAT_URL with $TOOLMESH_CHAT_MODEL",
			icfg.Inference.Backend, icfg.Inference.ChatURL, icfg.Inference.ChatModel)
	}
	if err := icfg.Validate(); err != nil {
		t.Errorf("CPU variant: inference config: %v", err)
	}
	if _, err := tryLoadProject(t, []string{composeFile, cpuOverride}, nil, nil); err == nil || !strings.Contains(err.Error(), "TOOLMESH_CHAT_URL") {
		t.Errorf("CPU variant without TOOLMESH_CHAT_URL: err = %v, want one naming TOOLMESH_CHAT_URL", err)
	}
}

// TestComposeAPIWithoutMCPConfig: the executor owns the MCP servers' rules and publishes them
// with its catalog; the api decides by what it publishes. So, in every variant, the executor
// reads deploy/mcp.json and the api neither is given --mcp-config nor mounts the file.
func TestComposeAPIWithoutMCPConfig(t *testing.T) {
	for _, files := range [][]string{{composeFile}, {composeFile, mtlsOverride}} {
		p := loadProject(t, files, []string{"*"}, nil)
		byTarget := serveServices(t, p)
		exe, api := byTarget["executor"], byTarget["api"]
		if exeFile, _ := flagValue(exe.Command, "mcp-config"); exeFile == "" || len(serveConfig(t, exe).Executor.Servers) == 0 {
			t.Errorf("%v: the executor reads no MCP servers (--mcp-config %q)", files, exeFile)
		}
		if apiFile, ok := flagValue(api.Command, "mcp-config"); ok {
			t.Errorf("%v: the api is given --mcp-config %q; the servers' rules come from the executor", files, apiFile)
		}
		for _, v := range api.Volumes {
			if v.Type == types.VolumeTypeBind && strings.HasSuffix(v.Source, "mcp.json") {
				t.Errorf("%v: the api mounts %s at %s; it reads no MCP server config", files, v.Source, v.Target)
			}
		}
	}
}
