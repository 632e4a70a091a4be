package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	qc "github.com/qdrant/go-client/qdrant"

	"github.com/toolmesh/toolmesh/internal/gobuild"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant/qdranttest"
)

// composeService is the part of a compose service the mesh test runs.
type composeService struct {
	Command     []string
	Volumes     []types.ServiceVolumeConfig
	HealthCheck []string
}

// readComposeCommands loads compose files (every profile) with the Compose loader, their
// ${VAR:-default} values at their defaults (an unset environment).
func readComposeCommands(t *testing.T, files ...string) map[string]composeService {
	t.Helper()
	if len(files) == 0 {
		files = []string{composeFile}
	}
	p := loadProject(t, files, []string{"*"}, nil)
	out := map[string]composeService{}
	for name, svc := range p.Services {
		cs := composeService{Command: svc.Command, Volumes: svc.Volumes}
		if svc.HealthCheck != nil {
			cs.HealthCheck = svc.HealthCheck.Test
		}
		out[name] = cs
	}
	return out
}

// mountedAt is the repository file the service bind-mounts at a container path.
func (s composeService) mountedAt(t *testing.T, containerPath string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == containerPath {
			return v.Source
		}
	}
	t.Fatalf("nothing from the repository is mounted at %s", containerPath)
	return ""
}

// inVolumes maps the container paths in arg that lie in a named volume the service mounts to
// that volume's folder on the host: volumes[NAME], plus the mount's subpath.
func (s composeService) inVolumes(arg string, volumes map[string]string) string {
	for _, v := range s.Volumes {
		host, ok := volumes[v.Source]
		if v.Type != types.VolumeTypeVolume || !ok {
			continue
		}
		if v.Volume != nil && v.Volume.Subpath != "" {
			host = filepath.Join(host, v.Volume.Subpath)
		}
		arg = strings.ReplaceAll(arg, v.Target, host)
	}
	return arg
}

// listenFlags are the flags each target listens on.
var listenFlags = map[string][]string{
	"executor":  {"executor.grpc-addr"},
	"retriever": {"retriever.grpc-addr"},
	"inference": {"inference.grpc-addr"},
	"api":       {"api.grpc-addr", "api.http-addr"},
}

// TestMeshWithoutContainers runs compose.yaml's topology without containers: the MCP servers
// and the four `toolmesh serve` services with compose's own commands and the config from
// deploy/ (every address in it moved to a free loopback port, Qdrant and llama-server swapped
// for their test doubles), and asks a question that needs a tool end to end.
func TestMeshWithoutContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	runMesh(t, composeFile)
}

// TestMeshWithoutContainersMTLS runs the mutual TLS variant (deploy/compose.mtls.yaml) the same
// way, as separate processes: tls-init's `toolmesh tls init` makes the CA and certificates
// first, each service reads its own folder, and every hop of the question is mutual TLS. The
// compose health checks pass over it, and a client without a certificate is refused.
func TestMeshWithoutContainersMTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	runMesh(t, composeFile, mtlsOverride)
}

// runMesh runs the topology of compose files without containers (see TestMeshWithoutContainers)
// and runs every serve service's compose health check against it.
func runMesh(t *testing.T, files ...string) {
	services := readComposeCommands(t, files...)
	bin := buildToolmesh(t)
	healthcheck := buildHealthcheck(t)

	// Named volumes a toolmesh service writes (tls-init's certificates, the executor's pins)
	// are folders here.
	volumes := map[string]string{"pins": t.TempDir()}
	if init, ok := services["tls-init"]; ok {
		volumes["tls"] = t.TempDir()
		var args []string
		for _, a := range init.Command {
			args = append(args, init.inVolumes(a, volumes))
		}
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("tls-init: toolmesh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// llama-server, as compose starts it (-c, -np), running Gorilla's side of the question.
	llamaArgs := services["llama-server"].Command
	ctxSize, _ := flagValue(llamaArgs, "c")
	slots, _ := flagValue(llamaArgs, "np")
	llamaPort, _ := flagValue(llamaArgs, "port")
	c, _ := strconv.Atoi(ctxSize)
	np, _ := strconv.Atoi(slots)
	llama := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: c, Parallel: np})
	scriptTwoPlusThree(llama)
	qdrant := qdranttest.Start(t)
	llamaURL, err := url.Parse(llama.URL)
	if err != nil {
		t.Fatal(err)
	}

	// Where each compose "service:port" is on loopback. What the test doubles stand in for is
	// known; every other port a service listens on gets a free one.
	loop := map[string]string{
		"qdrant:6334":                           qdrant.Addr(),
		"llama-server:" + llamaPort:             llamaURL.Host,
		"llama-embed:" + embedPort(t, services): freeAddr(t), // unused: the retriever embeds lexically
		"jaeger:4317":                           "",          // no collector: spans are not exported
	}
	configPath := services["api"].mountedAt(t, "/etc/toolmesh/toolmesh.yaml")
	_, deployFlags := loadServeFlags(t, []string{"--config=" + configPath})
	serveNames := map[string]string{} // target -> service
	for name, svc := range services {
		if len(svc.Command) > 0 && svc.Command[0] == "serve" {
			tg, _ := flagValue(svc.Command, "target")
			serveNames[tg] = name
			for _, f := range listenFlags[tg] {
				_, port := splitAddr(t, f, deployFlags.Lookup(f).Value.String())
				loop[name+":"+port] = freeAddr(t)
			}
		}
		if len(svc.Command) > 0 && svc.Command[0] == "mcp" {
			a, _ := flagValue(svc.Command, "addr")
			_, port := splitAddr(t, name+" --addr", a)
			loop[name+":"+port] = freeAddr(t)
		}
	}
	if len(serveNames) != len(serveTargets) {
		t.Fatalf("compose.yaml serve targets %v, want %v", serveNames, serveTargets)
	}

	// Every address in the config: a listen address (0.0.0.0:PORT of the service whose target
	// owns the flag) or a compose service to dial; both become their loopback address.
	var overrides []string
	deployFlags.VisitAll(func(f *flag.Flag) {
		if f.Name == "metrics-addr" {
			return // one per process, below
		}
		v := f.Value.String()
		moved, ok := relocate(t, f.Name, v, loop, serveNames)
		if ok {
			overrides = append(overrides, "--"+f.Name+"="+moved)
		}
	})

	mcpPath := relocateMCPConfig(t, services["executor"].mountedAt(t, "/etc/toolmesh/mcp.json"), loop, bin)

	for _, name := range []string{"calculator", "converter"} {
		args := slices.Clone(services[name].Command)
		a, _ := flagValue(args, "addr")
		_, port := splitAddr(t, name, a)
		args = replaceFlag(args, "addr", loop[name+":"+port])
		startProcess(t, bin, args...)
		waitListening(t, loop[name+":"+port])
	}
	metrics := map[string]string{}
	for _, tg := range []string{"executor", "retriever", "inference", "api"} {
		name := serveNames[tg]
		var args []string
		for _, a := range services[name].Command {
			switch {
			case strings.HasPrefix(a, "--config="):
				a = "--config=" + services[name].mountedAt(t, strings.TrimPrefix(a, "--config="))
			case strings.HasPrefix(a, "--mcp-config="):
				a = "--mcp-config=" + mcpPath
			}
			args = append(args, services[name].inVolumes(a, volumes))
		}
		args = append(args, overrides...)
		if _, port, err := net.SplitHostPort(deployFlags.Lookup("metrics-addr").Value.String()); err == nil {
			metrics[tg] = freeAddr(t)
			loop[name+":"+port] = metrics[tg]
			args = append(args, "--metrics-addr="+metrics[tg])
		}
		startProcess(t, bin, args...)
		for _, f := range listenFlags[tg] {
			_, port := splitAddr(t, f, deployFlags.Lookup(f).Value.String())
			waitListening(t, loop[name+":"+port])
		}
	}
	_, restPort := splitAddr(t, "api.http-addr", deployFlags.Lookup("api.http-addr").Value.String())
	base := "http://" + loop[serveNames["api"]+":"+restPort]
	waitReady(t, base)

	var resp struct {
		Answer     string `json:"answer"`
		Iterations int    `json:"iterations"`
		StopReason string `json:"stop_reason"`
		ToolCalls  []struct {
			Tool   string `json:"tool"`
			Output string `json:"output"`
		} `json:"tool_calls"`
	}
	postJSON(t, base+"/v1/query", `{"query":"What is 2 plus 3?"}`, &resp)
	if resp.Answer != "2 plus 3 is 5." || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Tool != "calculator.add" ||
		resp.ToolCalls[0].Output != "5" || resp.Iterations != 2 || resp.StopReason != "STOP_REASON_ANSWERED" {
		t.Errorf("POST /v1/query = %+v; want calculator.add → 5, then the answer \"2 plus 3 is 5.\" after 2 iterations", resp)
	}
	// The tools were indexed in (and the question searched in) Qdrant, not in memory.
	if qdrant.Calls(qc.Points_Upsert_FullMethodName) == 0 || qdrant.Calls(qc.Points_Query_FullMethodName) == 0 {
		t.Errorf("Qdrant double: %d upserts, %d queries; want the retriever to use the qdrant store",
			qdrant.Calls(qc.Points_Upsert_FullMethodName), qdrant.Calls(qc.Points_Query_FullMethodName))
	}
	// Every process serves its own metrics (--metrics-addr): the executor's count MCP calls.
	for _, tg := range serveTargets {
		if metrics[tg] == "" {
			t.Errorf("%s: no metrics-addr in the deploy config", tg)
			continue
		}
		body := getText(t, "http://"+metrics[tg]+"/metrics")
		if !strings.Contains(body, "rpc_server_call_duration_seconds") {
			t.Errorf("%s /metrics has no rpc_server_call_duration_seconds:\n%.500s", tg, body)
		}
	}
	// The stdio server of mcp.json is started by the executor and its tools are served.
	var tools struct {
		Tools []struct {
			ID, Server string
		} `json:"tools"`
	}
	getJSON(t, base+"/v1/tools", &tools)
	servers := map[string]bool{}
	for _, tool := range tools.Tools {
		servers[tool.Server] = true
	}
	for _, s := range mcpServerNames(t, mcpPath) {
		if !servers[s] {
			t.Errorf("GET /v1/tools has no tool of MCP server %s (servers with tools: %v)", s, servers)
		}
	}

	// Each service's compose health check, as its container runs it (its own loopback is the
	// service's loopback address here). With mutual TLS, the same check without the client
	// certificate, or without TLS at all, is refused by the gRPC services.
	for _, tg := range serveTargets {
		name := serveNames[tg]
		hc := services[name].HealthCheck
		if len(hc) < 3 || hc[0] != "CMD" || hc[1] != "toolmesh-healthcheck" {
			t.Errorf("%s: health check %v, want CMD toolmesh-healthcheck ...", name, hc)
			continue
		}
		var args []string
		for _, a := range hc[2:] {
			args = append(args, inContainer(t, name, services[name].inVolumes(a, volumes), loop))
		}
		// compose retries a check (the retriever is not ready until its index has synced).
		for try := 1; ; try++ {
			out, err := exec.Command(healthcheck, args...).CombinedOutput()
			if err == nil {
				break
			}
			if try == 30 {
				t.Errorf("%s: health check toolmesh-healthcheck %s, 30 tries 0.5 s apart: %v\n%s", name, strings.Join(args, " "), err, out)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-tls.") }) {
			continue
		}
		for _, drop := range []string{"-tls.cert-file=|-tls.key-file=", "-tls."} {
			without := []string{"-timeout=1s"} // bounds each refused check
			for _, a := range args {
				if !slices.ContainsFunc(strings.Split(drop, "|"), func(p string) bool { return strings.HasPrefix(a, p) }) {
					without = append(without, a)
				}
			}
			if out, err := exec.Command(healthcheck, without...).CombinedOutput(); err == nil {
				t.Errorf("%s: toolmesh-healthcheck %s answered; want the client refused (%s)", name, strings.Join(without, " "), out)
			}
		}
	}
}

var containerLoopback = regexp.MustCompile(`127\.0\.0\.1:([0-9]+)`)

// inContainer maps an address on the loopback of service name's container to the loopback
// address that service listens on here.
func inContainer(t *testing.T, name, arg string, loop map[string]string) string {
	t.Helper()
	return containerLoopback.ReplaceAllStringFunc(arg, func(m string) string {
		port := containerLoopback.FindStringSubmatch(m)[1]
		to, ok := loop[name+":"+port]
		if !ok {
			t.Fatalf("%s: %s is not a port %s listens on", name, m, name)
		}
		return to
	})
}

func embedPort(t *testing.T, services map[string]composeService) string {
	t.Helper()
	p, ok := flagValue(services["llama-embed"].Command, "port")
	if !ok {
		t.Fatal("llama-embed has no --port")
	}
	return p
}

// relocate maps a config value holding a compose address to its loopback address: a listen
// address 0.0.0.0:PORT to the one of the service whose target owns the flag, a host:port or
// URL naming a compose service to that service's. ok is false for values that hold no address.
func relocate(t *testing.T, name, v string, loop map[string]string, serveNames map[string]string) (string, bool) {
	t.Helper()
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return "", false
		}
		to, ok := dialAddr(t, name, u.Host, loop)
		if !ok {
			return "", false
		}
		u.Host = to
		return u.String(), true
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", false
	}
	if host == "0.0.0.0" {
		tg, _, _ := strings.Cut(name, ".")
		owner, ok := serveNames[tg]
		if !ok || !slices.Contains(listenFlags[tg], name) {
			t.Fatalf("%s = %s: a listen address, but not one of a target's listen flags", name, v)
		}
		return loop[owner+":"+port], true
	}
	return dialAddr(t, name, net.JoinHostPort(host, port), loop)
}

// dialAddr is the loopback address of a compose "service:port". A loopback host in the config
// would reach only the container itself and is an error.
func dialAddr(t *testing.T, name, hostport string, loop map[string]string) (string, bool) {
	t.Helper()
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", false
	}
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		t.Errorf("%s = %s: loopback inside a container reaches only that container", name, hostport)
		return "", false
	}
	to, ok := loop[hostport]
	if !ok {
		t.Fatalf("%s = %s: not a service and port of compose.yaml (known: %v)", name, hostport, loop)
	}
	return to, true
}

// relocateMCPConfig writes a copy of mcp.json whose URLs point at the loopback MCP servers
// and whose `toolmesh` commands run the binary under test.
func relocateMCPConfig(t *testing.T, path string, loop map[string]string, bin string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]map[string]map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for name, s := range doc["mcpServers"] {
		if raw, ok := s["url"].(string); ok {
			moved, ok := relocate(t, "mcpServers."+name+".url", raw, loop, nil)
			if !ok {
				t.Fatalf("mcp server %s: url %q", name, raw)
			}
			s["url"] = moved
		}
		if s["command"] == "toolmesh" {
			s["command"] = bin
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mcpServerNames(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range doc.MCPServers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func replaceFlag(args []string, name, value string) []string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			args[i+1] = value
		} else if strings.HasPrefix(a, "--"+name+"=") {
			args[i] = "--" + name + "=" + value
		}
	}
	return args
}

// scriptTwoPlusThree scripts the llama-server double for "What is 2 plus 3?": call
// calculator.add, then answer, then compose the final answer (no grammar) from the output.
func scriptTwoPlusThree(d *llamatest.Double) {
	d.ScriptFunc(func(r llamatest.Request) (llamatest.Reply, bool) {
		if !strings.Contains(r.Prompt, "What is 2 plus 3?") {
			return llamatest.Reply{}, false
		}
		switch {
		case r.Grammar == "":
			return llamatest.Reply{Pieces: []string{"2 plus 3 ", "is 5."}}, true
		case !strings.Contains(r.Prompt, "<<call>>"):
			return llamatest.Reply{Pieces: []string{"<<function>>calculator.add(a=2, b=3)"}}, true
		}
		return llamatest.Reply{Pieces: []string{"The sum is 5."}}, true
	})
}

func buildToolmesh(t *testing.T) string {
	t.Helper()
	return goBuild(t, "toolmesh", "github.com/toolmesh/toolmesh/cmd/toolmesh")
}

// buildHealthcheck builds the image's health-check program, which compose's checks run.
func buildHealthcheck(t *testing.T) string {
	t.Helper()
	return goBuild(t, "toolmesh-healthcheck", "github.com/toolmesh/toolmesh/deploy/healthcheck")
}

func goBuild(t *testing.T, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if err := gobuild.Build(t.Context(), "", bin, pkg); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startProcess runs bin until the test ends (interrupt, then kill after 10s) and shows its
// output if the test failed. The environment carries no TOOLMESH_ or OTEL_ variables.
func startProcess(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOOLMESH_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("toolmesh %s:\n%s", strings.Join(args, " "), out.String())
		}
	})
}

// freeAddr is a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 30s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady polls /readyz until the mesh says it is ready: every MCP server past its first
// connection (compose starts the executor once its servers answer, so they are connected) and
// the index in step.
func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET /readyz not ready after 60s: %s", last)
}

func postJSON(t *testing.T, u, body string, into any) {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	decode(t, "POST "+u, resp, into)
}

func getJSON(t *testing.T, u string, into any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, "GET "+u, resp, into)
}

func getText(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
	return string(b)
}

func decode(t *testing.T, what string, resp *http.Response, into any) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v in %s", what, err, b)
	}
}
