package chartcheck

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// cases are the value sets every check runs on: testdata/values/NAME.yaml.
var cases = []string{"defaults", "qdrant", "mtls", "openai-no-gpu", "hpa", "options"}

// toolmeshTargets are the four `toolmesh serve` targets, each a Deployment of the chart.
var toolmeshTargets = []string{"api", "retriever", "inference", "executor"}

// TestLint runs Helm's linter (`helm lint`, with each case's values) and fails on anything
// above INFO. The only warning allowed is the one for the Qdrant chart that `helm dependency
// build` has not fetched yet: charts/ is not committed.
func TestLint(t *testing.T) {
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			kv, err := common.ParseKubeVersion(kubeVersion)
			if err != nil {
				t.Fatal(err)
			}
			result := lint.RunAll(chartDir, valuesFile(t, name), namespace, lint.WithKubeVersion(kv))
			for _, m := range result.Messages {
				if m.Severity < support.WarningSev {
					continue
				}
				if m.Severity == support.WarningSev && strings.Contains(m.Err.Error(), "chart directory is missing these dependencies: qdrant") {
					continue
				}
				t.Errorf("helm lint: %s", m)
			}
		})
	}
}

// TestChart renders each case and checks what a user depends on.
func TestChart(t *testing.T) {
	t.Logf("Qdrant's chart: %s", qdrantChartUsed(t))
	appVersion := chartAppVersion(t)
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			r := render(t, valuesFile(t, name))
			checkContainers(t, r, appVersion)
			checkNoSecretValues(t, r)
			checkGracePeriod(t, r)
			checkAPIService(t, r)
			checkInternalServices(t, r)
			checkPDBs(t, r)
			checkNetworkPolicies(t, r)
			checkNotes(t, r)
			if check, ok := caseChecks[name]; ok {
				check(t, r)
			}
		})
	}
}

// caseChecks are what each case must change, beyond the checks every case passes.
var caseChecks = map[string]func(*testing.T, *rendered){
	"defaults": func(t *testing.T, r *rendered) {
		cfg := r.toolmeshConfig(t)
		if got := str(cfg, "retriever", "store"); got != "memory" {
			t.Errorf("retriever.store = %q, want memory (no Qdrant)", got)
		}
		if got := str(cfg, "inference", "backend"); got != "gorilla" {
			t.Errorf("inference.backend = %q, want gorilla", got)
		}
		llama := r.deployments["llama-server"]
		if llama == nil {
			t.Fatal("no llama-server Deployment with the gorilla backend and no inference.llm.url")
		}
		checkLlamaServer(t, r, llama, cfg)
		if len(r.hpas) != 0 {
			t.Errorf("%d HorizontalPodAutoscalers by default, want none", len(r.hpas))
		}
		for _, c := range []string{"api", "inference"} {
			if d := r.deployments[c]; d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
				t.Errorf("%s: replicas %v, want 2", c, d.Spec.Replicas)
			}
		}
		// Auth on: the tokens file from the Secret, and /readyz probed with a token.
		api := container(t, r.deployments["api"], "api")
		if got := str(cfg, "api", "tokens-file"); got != "/etc/toolmesh/api-tokens/tokens" {
			t.Errorf("api.tokens-file = %q", got)
		}
		if mountOf(r.deployments["api"], api, "/etc/toolmesh/api-tokens") == nil {
			t.Error("api: the tokens Secret is not mounted at /etc/toolmesh/api-tokens")
		}
		if p := api.ReadinessProbe; p.Exec == nil || !slices.Contains(p.Exec.Command, "http://127.0.0.1:7700/readyz") {
			t.Errorf("api readiness probe %+v: want toolmesh-healthcheck on /readyz (it needs a token)", p.ProbeHandler)
		}
		if env := envVar(api, "TOOLMESH_TOKEN"); env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil {
			t.Error("api: TOOLMESH_TOKEN (the probe's token) is not taken from the tokens Secret")
		}
		// The stdio servers run inside the executor.
		mcp := r.mcpServers(t)
		for _, s := range []string{"calculator", "converter", "sqlite"} {
			if mcp[s]["command"] != "toolmesh" {
				t.Errorf("mcpServers.%s = %v, want the shipped server over stdio", s, mcp[s])
			}
		}
	},
	"qdrant": func(t *testing.T, r *rendered) {
		cfg := r.toolmeshConfig(t)
		if got := str(cfg, "retriever", "store"); got != "qdrant" {
			t.Errorf("retriever.store = %q, want qdrant", got)
		}
		addr := str(cfg, "retriever", "qdrant", "addr")
		host, port := splitAddr(t, "retriever.qdrant.addr", addr)
		svc := r.services[serviceName(t, host)]
		if svc == nil || r.ours[svc] {
			t.Fatalf("retriever.qdrant.addr %s names no Service of Qdrant's chart", addr)
		}
		if !servicePort(svc, port) {
			t.Errorf("Qdrant's Service %s has no port %s", svc.Name, port)
		}
		ret := container(t, r.deployments["retriever"], "retriever")
		if env := envVar(ret, "TOOLMESH_QDRANT_API_KEY"); env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef.Name != "qdrant-key" {
			t.Errorf("retriever: TOOLMESH_QDRANT_API_KEY = %+v, want Secret qdrant-key", env)
		}
	},
	"mtls": func(t *testing.T, r *rendered) {
		cfg := r.toolmeshConfig(t)
		for flag, file := range map[string]string{"cert-file": "tls.crt", "key-file": "tls.key", "ca-file": "ca.crt"} {
			if got, want := str(cfg, "tls", flag), "/etc/toolmesh/tls/"+file; got != want {
				t.Errorf("tls.%s = %q, want %q", flag, got, want)
			}
		}
		if len(r.certs) != 1 {
			t.Fatalf("%d cert-manager Certificates, want 1", len(r.certs))
		}
		cert := r.certs[0]
		for _, c := range toolmeshTargets {
			d := r.deployments[c]
			ctr := container(t, d, c)
			v := volumeOf(d, mountOf(d, ctr, "/etc/toolmesh/tls"))
			if v == nil || v.Secret == nil || v.Secret.SecretName != cert.Spec.SecretName {
				t.Errorf("%s: /etc/toolmesh/tls is not the Certificate's Secret %s", c, cert.Spec.SecretName)
			}
			if c == "api" {
				continue
			}
			// Kubernetes' gRPC probes speak plaintext: with mTLS they must not be used.
			host := serviceHostOf(r, c)
			for _, p := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe, ctr.StartupProbe} {
				if p.GRPC != nil || p.Exec == nil {
					t.Errorf("%s: probe %+v, want toolmesh-healthcheck over TLS", c, p.ProbeHandler)
					continue
				}
				if !slices.Contains(p.Exec.Command, "-tls.server-name="+host) {
					t.Errorf("%s: probe %v does not check the certificate for %s", c, p.Exec.Command, host)
				}
			}
			if !slices.Contains(cert.Spec.DNSNames, host) {
				t.Errorf("Certificate dnsNames %v lack %s, the name callers dial", cert.Spec.DNSNames, host)
			}
		}
		if !slices.Contains(cert.Spec.Usages, "server auth") || !slices.Contains(cert.Spec.Usages, "client auth") {
			t.Errorf("Certificate usages %v: mTLS needs server auth and client auth", cert.Spec.Usages)
		}
		if cert.Spec.IssuerRef.Name != "toolmesh-ca" {
			t.Errorf("Certificate issuer %q, want toolmesh-ca", cert.Spec.IssuerRef.Name)
		}
	},
	"openai-no-gpu": func(t *testing.T, r *rendered) {
		cfg := r.toolmeshConfig(t)
		if got := str(cfg, "inference", "backend"); got != "openai" {
			t.Errorf("inference.backend = %q, want openai", got)
		}
		if got := str(cfg, "inference", "chat", "url"); got != "http://ollama.ai.svc.cluster.local:11434/v1" {
			t.Errorf("inference.chat.url = %q", got)
		}
		if r.deployments["llama-server"] != nil || len(r.pvcs) != 0 {
			t.Error("llama-server (or its model volume) rendered with the openai backend")
		}
		for _, o := range r.objects {
			if spec := podSpec(o); spec != nil {
				for _, c := range allContainers(spec) {
					if _, ok := c.Resources.Limits["nvidia.com/gpu"]; ok {
						t.Errorf("container %s asks for a GPU with the openai backend", c.Name)
					}
				}
			}
		}
		inf := container(t, r.deployments["inference"], "inference")
		if env := envVar(inf, "TOOLMESH_LLM_API_KEY"); env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef.Name != "llm-key" {
			t.Errorf("inference: TOOLMESH_LLM_API_KEY = %+v, want Secret llm-key", env)
		}
	},
	"hpa": func(t *testing.T, r *rendered) {
		got := map[string]bool{}
		for _, h := range r.hpas {
			ref := h.Spec.ScaleTargetRef
			var target string
			for c, d := range r.deployments {
				if ref.Kind == "Deployment" && ref.APIVersion == "apps/v1" && ref.Name == d.Name {
					target = c
				}
			}
			if target == "" {
				t.Errorf("HPA %s scales %s %s, which the chart does not render", h.Name, ref.Kind, ref.Name)
				continue
			}
			got[target] = true
			if r.deployments[target].Spec.Replicas != nil {
				t.Errorf("%s: replicas set while an HPA scales it (every upgrade would reset the HPA's choice)", target)
			}
			if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
				t.Errorf("HPA %s: min %v max %d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
			}
		}
		if !got["api"] || !got["inference"] || len(got) != 2 {
			t.Errorf("HPAs scale %v, want exactly api and inference", got)
		}
	},
	"options": func(t *testing.T, r *rendered) {
		cfg := r.toolmeshConfig(t)
		for _, c := range []struct{ got, want string }{
			{str(cfg, "inference", "llm", "url"), "http://gpu-box.models.svc.cluster.local:8080"},
			{str(cfg, "retriever", "store"), "qdrant"},
			{str(cfg, "retriever", "qdrant", "addr"), "qdrant.vector.svc.cluster.local:6334"},
			{str(cfg, "retriever", "qdrant", "ca-file"), "/etc/toolmesh/qdrant-ca/ca.crt"},
			{str(cfg, "retriever", "embedder"), "http"},
			{str(cfg, "otel", "endpoint"), "jaeger-collector.observability.svc.cluster.local:4317"},
			{str(cfg, "api", "jaeger-url"), "https://jaeger.example.com"},
			{str(cfg, "executor", "call-timeout"), "30s"},
			{str(cfg, "api", "tokens-file"), ""},
		} {
			if c.got != c.want {
				t.Errorf("config: got %q, want %q", c.got, c.want)
			}
		}
		if r.deployments["llama-server"] != nil {
			t.Error("llama-server rendered although inference.llm.url names one outside")
		}
		ret := r.deployments["retriever"]
		if v := volumeOf(ret, mountOf(ret, container(t, ret, "retriever"), "/etc/toolmesh/qdrant-ca")); v == nil || v.Secret == nil || v.Secret.SecretName != "qdrant-ca" {
			t.Error("retriever: Qdrant's CA is not Secret qdrant-ca mounted at /etc/toolmesh/qdrant-ca")
		}
		// The sidecar is an MCP server over loopback, beside the declared ones.
		mcp := r.mcpServers(t)
		if got := mcp["notes"]["url"]; got != "http://127.0.0.1:7810/mcp" {
			t.Errorf("mcpServers.notes.url = %v, want the sidecar on loopback", got)
		}
		if len(mcp) != 3 {
			t.Errorf("mcpServers %v, want calculator, github and the notes sidecar", mcp)
		}
		exe := r.deployments["executor"]
		if len(exe.Spec.Template.Spec.Containers) != 2 {
			t.Errorf("executor pod has %d containers, want the executor and one sidecar", len(exe.Spec.Template.Spec.Containers))
		}
		// No tokens: /readyz is an ordinary HTTP probe.
		api := container(t, r.deployments["api"], "api")
		if p := api.ReadinessProbe; p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
			t.Errorf("api readiness probe %+v, want GET /readyz", p.ProbeHandler)
		}
		if !strings.Contains(r.notes, "WARNING") {
			t.Error("NOTES say nothing about the api needing no token")
		}
		if len(r.ingresses) != 1 {
			t.Fatalf("%d Ingresses, want 1", len(r.ingresses))
		}
		backend := r.ingresses[0].Spec.Rules[0].HTTP.Paths[0].Backend.Service
		if svc := r.services[backend.Name]; svc == nil || svc.Labels["app.kubernetes.io/component"] != "api" || !servicePort(svc, backend.Port.Name) {
			t.Errorf("Ingress backend %s:%s is not the api Service's port", backend.Name, backend.Port.Name)
		}
	},
}

// checkContainers: every container has probes (init containers cannot), requests and limits
// of CPU and memory, a non-root read-only security context, and the toolmesh image at the
// chart's appVersion.
func checkContainers(t *testing.T, r *rendered, appVersion string) {
	t.Helper()
	for _, o := range r.objects {
		spec := podSpec(o)
		if spec == nil || !r.ours[o] {
			continue
		}
		where := objectName(o)
		_, isTestPod := o.(*corev1.Pod)
		if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod not runAsNonRoot", where)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: the service account token is mounted; toolmesh never calls the Kubernetes API", where)
		}
		for _, c := range spec.InitContainers {
			checkResources(t, where, c)
			checkSecurity(t, where, c)
		}
		for _, c := range spec.Containers {
			checkResources(t, where, c)
			checkSecurity(t, where, c)
			if !isTestPod && (c.ReadinessProbe == nil || c.LivenessProbe == nil) {
				t.Errorf("%s/%s: readiness and liveness probes required, got %v and %v", where, c.Name, c.ReadinessProbe, c.LivenessProbe)
			}
			if name, tag, ok := strings.Cut(c.Image, ":"); ok && name == "toolmesh" && tag != appVersion {
				t.Errorf("%s/%s: image %s, want tag %s (appVersion)", where, c.Name, c.Image, appVersion)
			}
		}
		for _, c := range allContainers(spec) {
			for _, m := range c.VolumeMounts {
				if volumeOf2(spec, m.Name) == nil {
					t.Errorf("%s/%s: mounts volume %q, which the pod does not have", where, c.Name, m.Name)
				}
			}
		}
	}
	for _, c := range toolmeshTargets {
		d := r.deployments[c]
		if d == nil {
			t.Fatalf("no Deployment for %s", c)
		}
		ctr := container(t, d, c)
		if ctr.Image != "toolmesh:"+appVersion {
			t.Errorf("%s: image %s, want toolmesh:%s", c, ctr.Image, appVersion)
		}
		want := []string{"serve", "--target=" + c, "--config=/etc/toolmesh/config/toolmesh.yaml"}
		if len(ctr.Args) < 3 || !slices.Equal(ctr.Args[:3], want) {
			t.Errorf("%s: args %v, want to start with %v", c, ctr.Args, want)
		}
	}
}

func checkResources(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Limits[res]; !ok {
			t.Errorf("%s/%s: no %s limit", where, c.Name, res)
		}
		if _, ok := c.Resources.Requests[res]; !ok {
			t.Errorf("%s/%s: no %s request", where, c.Name, res)
		}
	}
}

func checkSecurity(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	s := c.SecurityContext
	if s == nil || s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem ||
		s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation ||
		s.Capabilities == nil || !slices.Contains(s.Capabilities.Drop, "ALL") {
		t.Errorf("%s/%s: security context %+v, want a read-only root, no privilege escalation, every capability dropped", where, c.Name, s)
	}
}

// checkNoSecretValues: the chart never writes a secret. It renders no Secret object, every
// environment variable whose name says it is a secret comes from a Secret by reference, and
// no ConfigMap carries one.
func checkNoSecretValues(t *testing.T, r *rendered) {
	t.Helper()
	for _, s := range r.secrets {
		if r.ours[s] {
			t.Errorf("the chart renders Secret %s: secrets must come from existing Secrets", s.Name)
		}
	}
	for _, o := range r.objects {
		spec := podSpec(o)
		if spec == nil || !r.ours[o] {
			continue
		}
		for _, c := range allContainers(spec) {
			for _, e := range c.Env {
				if secretName(e.Name) && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s/%s: env %s is not taken from a Secret", objectName(o), c.Name, e.Name)
				}
			}
			for _, a := range append(slices.Clone(c.Command), c.Args...) {
				if strings.Contains(strings.ToLower(a), "api-key=") || strings.Contains(strings.ToLower(a), "token=") {
					t.Errorf("%s/%s: argument %q carries a secret (arguments show in ps)", objectName(o), c.Name, a)
				}
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == "" {
				t.Errorf("%s: volume %s names no Secret", objectName(o), v.Name)
			}
		}
	}
	for _, cm := range r.configMaps {
		for k, v := range cm.Data {
			lower := strings.ToLower(v)
			for _, bad := range []string{"api-key:", "api_key:", "password:", "tokens:"} {
				if strings.Contains(lower, bad) {
					t.Errorf("ConfigMap %s key %s holds %q", cm.Name, k, bad)
				}
			}
		}
	}
}

func secretName(env string) bool {
	for _, s := range []string{"TOKEN", "KEY", "SECRET", "PASSWORD"} {
		if strings.Contains(env, s) {
			return true
		}
	}
	return false
}

// checkGracePeriod: Kubernetes kills a pod terminationGracePeriodSeconds after it asks it to
// stop; that must leave the preStop sleep and the whole drain (--drain-timeout) time to run.
func checkGracePeriod(t *testing.T, r *rendered) {
	t.Helper()
	drain, err := time.ParseDuration(str(r.toolmeshConfig(t), "drain-timeout"))
	if err != nil {
		t.Fatalf("drain-timeout: %v", err)
	}
	for c, d := range r.deployments {
		spec := d.Spec.Template.Spec
		grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
		var sleep time.Duration
		for _, ctr := range spec.Containers {
			if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil && ctr.Lifecycle.PreStop.Sleep != nil {
				sleep = max(sleep, time.Duration(ctr.Lifecycle.PreStop.Sleep.Seconds)*time.Second)
			}
		}
		if grace <= sleep+drain {
			t.Errorf("%s: terminationGracePeriodSeconds %s is not above the preStop sleep %s plus the drain %s", c, grace, sleep, drain)
		}
	}
}

// checkAPIService: the api's Service selects the api pods and only them, and its ports lead to
// the api container's REST and gRPC ports.
func checkAPIService(t *testing.T, r *rendered) {
	t.Helper()
	var svc *corev1.Service
	for _, s := range r.services {
		if r.ours[s] && s.Labels["app.kubernetes.io/component"] == "api" {
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("no api Service")
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Error("the api Service is headless: outside clients need one address")
	}
	checkSelects(t, r, svc, "api")
	api := container(t, r.deployments["api"], "api")
	for _, want := range []struct {
		name string
		port int32
	}{{"http", 7700}, {"grpc", 7701}} {
		var found bool
		for _, p := range svc.Spec.Ports {
			if p.Name == want.name {
				found = targetPort(api, p.TargetPort.String()) == want.port
			}
		}
		if !found {
			t.Errorf("api Service: port %s does not lead to container port %d", want.name, want.port)
		}
	}
}

// checkInternalServices: the executor, retriever and inference each have a headless Service
// selecting their pods, and the addresses in the config are those Services' names and ports,
// so each caller resolves every pod and spreads calls over them.
func checkInternalServices(t *testing.T, r *rendered) {
	t.Helper()
	cfg := r.toolmeshConfig(t)
	callers := map[string][][]string{
		"executor":  {{"api", "executor-addr"}, {"retriever", "executor-addr"}},
		"retriever": {{"api", "retriever-addr"}},
		"inference": {{"api", "inference-addr"}},
	}
	for c, keys := range callers {
		for _, k := range keys {
			addr := str(cfg, k...)
			host, port := splitAddr(t, strings.Join(k, "."), addr)
			svc := r.services[serviceName(t, host)]
			if svc == nil {
				t.Errorf("%s = %s: no such Service", strings.Join(k, "."), addr)
				continue
			}
			if svc.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("Service %s is not headless: calls would stick to one %s pod", svc.Name, c)
			}
			checkSelects(t, r, svc, c)
			ctr := container(t, r.deployments[c], c)
			var ok bool
			for _, p := range svc.Spec.Ports {
				if fmt.Sprint(p.Port) == port && fmt.Sprint(targetPort(ctr, p.TargetPort.String())) == port {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s = %s: Service %s does not lead port %s to the %s container's port", strings.Join(k, "."), addr, svc.Name, port, c)
			}
			if want := fmt.Sprintf("%s.%s.svc.cluster.local", svc.Name, namespace); host != want {
				t.Errorf("%s = %s, want the full name %s", strings.Join(k, "."), addr, want)
			}
		}
	}
	for _, c := range []string{"executor", "retriever", "inference"} {
		if got := str(cfg, c, "grpc-addr"); got != "0.0.0.0:"+fmt.Sprint(map[string]int{"retriever": 7702, "inference": 7703, "executor": 7704}[c]) {
			t.Errorf("%s.grpc-addr = %s: the pod must listen on every interface", c, got)
		}
	}
}

// checkSelects: svc selects the pods of component and no other pods of the release.
func checkSelects(t *testing.T, r *rendered, svc *corev1.Service, component string) {
	t.Helper()
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s has no selector", svc.Name)
		return
	}
	for c, d := range r.deployments {
		got := subset(svc.Spec.Selector, d.Spec.Template.Labels)
		if got != (c == component) {
			t.Errorf("Service %s selects %s pods: %v, want %v", svc.Name, c, got, c == component)
		}
	}
}

// checkPDBs: each Deployment has one PodDisruptionBudget selecting exactly its pods, and it
// never forbids every eviction (a drain would hang).
func checkPDBs(t *testing.T, r *rendered) {
	t.Helper()
	for c, d := range r.deployments {
		var n int
		for _, p := range r.pdbs {
			if subset(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				n++
				if mu := p.Spec.MaxUnavailable; mu != nil && mu.IntValue() < 1 && mu.String() != "" && !strings.HasSuffix(mu.String(), "%") {
					t.Errorf("PDB %s: maxUnavailable %s blocks every eviction", p.Name, mu)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select its pods, want 1", c, n)
		}
	}
}

func checkNotes(t *testing.T, r *rendered) {
	t.Helper()
	for _, want := range []string{"port-forward svc/" + r.deployments["api"].Name, "/ui/", "/v1/query", "What is 2 plus 3?"} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, r.notes)
		}
	}
}

// checkLlamaServer: llama-server asks for a GPU, loads the model from the volume the init
// container fills with `toolmesh model pull`, and inference points at its Service.
func checkLlamaServer(t *testing.T, r *rendered, d *appsv1.Deployment, cfg map[string]any) {
	t.Helper()
	spec := d.Spec.Template.Spec
	ctr := container(t, d, "llama-server")
	if q, ok := ctr.Resources.Limits["nvidia.com/gpu"]; !ok || q.Value() != 1 {
		t.Errorf("llama-server: nvidia.com/gpu limit %v, want 1", ctr.Resources.Limits)
	}
	if len(spec.InitContainers) != 1 {
		t.Fatalf("llama-server: %d init containers, want model-pull", len(spec.InitContainers))
	}
	pull := spec.InitContainers[0]
	if want := []string{"model", "pull", "gorilla-openfunctions-v2", "--models-dir", "/models"}; !slices.Equal(pull.Args, want) {
		t.Errorf("model-pull args %v, want %v", pull.Args, want)
	}
	if mountOf(d, &pull, "/models") == nil || mountOf(d, ctr, "/models") == nil {
		t.Error("the model volume is not mounted at /models in both containers")
	}
	if v := volumeOf(d, mountOf(d, ctr, "/models")); v == nil || v.PersistentVolumeClaim == nil {
		t.Error("the model volume is not a PersistentVolumeClaim")
	} else if len(r.pvcs) != 1 || r.pvcs[0].Name != v.PersistentVolumeClaim.ClaimName {
		t.Errorf("the model volume's claim %s is not rendered", v.PersistentVolumeClaim.ClaimName)
	}
	// That the pull writes the very file -m names is checked by the main module's
	// TestChartModelPull, which runs the pull (testdata/served).
	if i := slices.Index(ctr.Args, "-m"); i < 0 || !strings.HasPrefix(ctr.Args[i+1], "/models/") {
		t.Errorf("llama-server args %v: -m is not a file of the model volume", ctr.Args)
	}
	if env := envVar(&pull, "HF_TOKEN"); env != nil && (env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil) {
		t.Error("model-pull: HF_TOKEN not from a Secret")
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("llama-server strategy %s: a rolling update would wait for a second GPU", d.Spec.Strategy.Type)
	}
	url := str(cfg, "inference", "llm", "url")
	host, port := splitAddr(t, "inference.llm.url", strings.TrimPrefix(url, "http://"))
	svc := r.services[serviceName(t, host)]
	if svc == nil || !servicePort(svc, port) {
		t.Fatalf("inference.llm.url %s: no Service with that port", url)
	}
	checkSelects(t, r, svc, "llama-server")
}

// --- reading rendered objects ---

func (r *rendered) configMap(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	cm := r.configMaps[fmt.Sprintf("%s-toolmesh-config", releaseName)]
	if cm == nil {
		t.Fatal("no toolmesh ConfigMap")
	}
	return cm
}

// toolmeshConfig is toolmesh.yaml as the services read it.
func (r *rendered) toolmeshConfig(t *testing.T) map[string]any {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(r.configMap(t).Data["toolmesh.yaml"]), &cfg); err != nil {
		t.Fatalf("toolmesh.yaml: %v", err)
	}
	return cfg
}

func (r *rendered) mcpServers(t *testing.T) map[string]map[string]any {
	t.Helper()
	var doc struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(r.configMap(t).Data["mcp.json"]), &doc); err != nil {
		t.Fatalf("mcp.json: %v", err)
	}
	return doc.MCPServers
}

// str is the string at path in a decoded YAML document ("" when absent).
func str(doc map[string]any, path ...string) string {
	v := lookup(doc, path...)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// lookup is the value at path in a decoded YAML document (nil when absent).
func lookup(doc map[string]any, path ...string) any {
	var cur any = doc
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func podSpec(o runtime.Object) *corev1.PodSpec {
	switch o := o.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &o.Spec.Template.Spec
	case *corev1.Pod:
		return &o.Spec
	}
	return nil
}

func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

func objectName(o runtime.Object) string {
	switch o := o.(type) {
	case *appsv1.Deployment:
		return "Deployment " + o.Name
	case *appsv1.StatefulSet:
		return "StatefulSet " + o.Name
	case *corev1.Pod:
		return "Pod " + o.Name
	}
	return fmt.Sprintf("%T", o)
}

func container(t *testing.T, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	if d == nil {
		t.Fatalf("no Deployment for container %s", name)
	}
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("%s: no container %s", d.Name, name)
	return nil
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func mountOf(d *appsv1.Deployment, c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volumeOf(d *appsv1.Deployment, m *corev1.VolumeMount) *corev1.Volume {
	if m == nil {
		return nil
	}
	return volumeOf2(&d.Spec.Template.Spec, m.Name)
}

func volumeOf2(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// targetPort resolves a Service's targetPort (a name or a number) in container c.
func targetPort(c *corev1.Container, tp string) int32 {
	for _, p := range c.Ports {
		if p.Name == tp || fmt.Sprint(p.ContainerPort) == tp {
			return p.ContainerPort
		}
	}
	return 0
}

func servicePort(svc *corev1.Service, port string) bool {
	for _, p := range svc.Spec.Ports {
		if fmt.Sprint(p.Port) == port || p.Name == port {
			return true
		}
	}
	return false
}

// serviceName is the Service a host name in the release's namespace resolves through.
func serviceName(t *testing.T, host string) string {
	t.Helper()
	name, rest, _ := strings.Cut(host, ".")
	if rest != "" && rest != namespace+".svc.cluster.local" && rest != namespace+".svc" && rest != namespace {
		t.Errorf("host %s is not in namespace %s", host, namespace)
	}
	return name
}

func serviceHostOf(r *rendered, component string) string {
	for _, s := range r.services {
		if r.ours[s] && s.Labels["app.kubernetes.io/component"] == component {
			return fmt.Sprintf("%s.%s.svc.cluster.local", s.Name, namespace)
		}
	}
	return ""
}

func splitAddr(t *testing.T, what, addr string) (host, port string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: %q is not host:port: %v", what, addr, err)
	}
	return host, port
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return ch.Metadata.AppVersion
}
