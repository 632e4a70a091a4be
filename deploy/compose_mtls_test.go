package deploy

import (
	"net"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// mtlsDir is where each service of the mTLS variant mounts its own certificate folder.
const mtlsDir = "/etc/toolmesh/tls"

// mtlsFlags are the flags the mTLS variant adds to each service's command.
var mtlsFlags = []string{
	"--tls.cert-file=" + mtlsDir + "/tls.crt", "--tls.key-file=" + mtlsDir + "/tls.key", "--tls.ca-file=" + mtlsDir + "/ca.crt",
}

// TestComposeMTLS: the mTLS variant is compose.yaml plus tls-init, which issues a certificate
// for every name the services are dialled by, and the four services with their compose.yaml
// commands and the --tls.* flags, each mounting only its own folder of the tls volume (never
// the CA's key), waiting for tls-init, and health-checked over the same mutual TLS.
func TestComposeMTLS(t *testing.T) {
	base := loadProject(t, []string{composeFile}, []string{"*"}, nil)
	p := loadProject(t, []string{composeFile, mtlsOverride}, []string{"*"}, nil)
	if got, want := sortedNames(p.Services), append(sortedNames(base.Services), "tls-init"); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("services of the mTLS variant = %v, want compose.yaml's and tls-init", got)
	}
	initSvc, ok := p.Services["tls-init"]
	if !ok {
		t.Fatal("no tls-init service")
	}
	api := serveServices(t, p)["api"]
	if len(initSvc.Command) < 2 || initSvc.Command[0] != "tls" || initSvc.Command[1] != "init" {
		t.Fatalf("tls-init runs %v, want `toolmesh tls init`", initSvc.Command)
	}
	if initSvc.Image != api.Image || initSvc.Build == nil || initSvc.Build.Context != repoRoot(t) || initSvc.Restart != types.RestartPolicyNo || !initSvc.ReadOnly {
		t.Errorf("tls-init: image %q build %+v restart %q read_only %v; want the toolmesh image built from the repository, one-shot, read-only",
			initSvc.Image, initSvc.Build, initSvc.Restart, initSvc.ReadOnly)
	}
	dir, _ := flagValue(initSvc.Command, "dir")
	namesFlag, _ := flagValue(initSvc.Command, "names")
	names := strings.Split(namesFlag, ",")
	var volume string
	for _, v := range initSvc.Volumes {
		if v.Target == dir && v.Type == types.VolumeTypeVolume {
			volume = v.Source
		}
	}
	if volume == "" {
		t.Fatalf("tls-init writes to --dir %s, which is not a volume it mounts (%+v)", dir, initSvc.Volumes)
	}

	baseServe := serveServices(t, base)
	for _, tg := range serveTargets {
		svc, was := serveServices(t, p)[tg], baseServe[tg]
		if want := append(slices.Clone(was.Command), mtlsFlags...); !slices.Equal(svc.Command, want) {
			t.Errorf("%s: command\n  %v\nwant compose.yaml's with the TLS flags\n  %v", svc.Name, svc.Command, want)
		}
		if !slices.Contains(names, svc.Name) {
			t.Errorf("tls-init --names %s: no certificate for %s", namesFlag, svc.Name)
		}
		var mounted bool
		for _, v := range svc.Volumes {
			if v.Source != volume {
				continue
			}
			if v.Target != mtlsDir || v.Volume == nil || v.Volume.Subpath != svc.Name || !v.ReadOnly {
				t.Errorf("%s mounts the %s volume %+v; want its own folder (subpath %s) read-only at %s: the volume's top holds the CA's key",
					svc.Name, volume, v, svc.Name, mtlsDir)
			}
			mounted = true
		}
		if !mounted {
			t.Errorf("%s does not mount its certificate folder", svc.Name)
		}
		if dep, ok := svc.DependsOn["tls-init"]; !ok || dep.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: depends_on tls-init %+v, want service_completed_successfully", svc.Name, dep)
		}
		for d := range was.DependsOn {
			if _, ok := svc.DependsOn[d]; !ok {
				t.Errorf("%s no longer waits for %s", svc.Name, d)
			}
		}
		cfg := serveConfig(t, svc)
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", svc.Name, err)
		}
		if !cfg.TLS.Mutual() {
			t.Errorf("%s: mutual TLS is off", svc.Name)
		}
		// Every address a target dials names a service with a certificate for that name.
		for _, addr := range []string{cfg.API.ExecutorAddr, cfg.API.RetrieverAddr, cfg.API.InferenceAddr, cfg.Retriever.ExecutorAddr} {
			if host, _, err := net.SplitHostPort(addr); err != nil || !slices.Contains(names, host) {
				t.Errorf("%s dials %s, whose name tls-init --names %s does not issue", svc.Name, addr, namesFlag)
			}
		}
		if tg == "api" {
			if !slices.Equal(svc.HealthCheck.Test, was.HealthCheck.Test) {
				t.Errorf("api health check %v, want compose.yaml's %v (REST is not TLS)", svc.HealthCheck.Test, was.HealthCheck.Test)
			}
			continue
		}
		// The gRPC health check: compose.yaml's, over the service's own certificate.
		hc := svc.HealthCheck.Test
		for _, f := range []string{"-tls.ca-file=" + path.Join(mtlsDir, "ca.crt"), "-tls.cert-file=" + path.Join(mtlsDir, "tls.crt"), "-tls.key-file=" + path.Join(mtlsDir, "tls.key")} {
			if !slices.Contains(hc, f) {
				t.Errorf("%s: health check %v lacks %s", svc.Name, hc, f)
			}
		}
		if i := slices.Index(hc, "grpc"); i < 0 || !slices.Equal(hc[i:], was.HealthCheck.Test[slices.Index(was.HealthCheck.Test, "grpc"):]) {
			t.Errorf("%s: health check %v does not ask what compose.yaml's %v asks", svc.Name, hc, was.HealthCheck.Test)
		}
	}
	for _, name := range sortedNames(p.Services) {
		for _, v := range p.Services[name].Volumes {
			if name != "tls-init" && v.Source == volume && (v.Volume == nil || v.Volume.Subpath == "") {
				t.Errorf("%s mounts the whole %s volume, CA key included", name, volume)
			}
		}
	}
}
