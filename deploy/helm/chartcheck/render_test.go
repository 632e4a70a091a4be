package chartcheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The chart under test and where the tests render it.
const (
	chartDir    = "../toolmesh"
	releaseName = "tm"
	namespace   = "mesh"
)

// kubeVersion is the Kubernetes version the chart is rendered for: the oldest Chart.yaml
// accepts, so that every API the chart uses is checked against the oldest cluster it claims.
// (Helm as a library assumes v1.20 unless told.)
const kubeVersion = "v1.30.0"

// envQdrantChart names a real copy of Qdrant's chart (a folder or a .tgz, as `helm dependency
// build` or `helm pull qdrant/qdrant --version 1.17.1` leaves it) to render instead of the
// double in testdata/qdrant-chart-double.
const envQdrantChart = "TOOLMESH_QDRANT_CHART"

// loadChart loads the chart as `helm dependency build` would leave it: with Qdrant's chart in
// charts/. Chart repositories cannot be reached from the machines this runs on, so unless
// envQdrantChart names the real chart, or a `helm dependency build` already put it in charts/,
// the subchart is a double that renders only what this chart relies on (its Service's name and
// ports), written from Qdrant's chart 1.17.1.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	src := qdrantChartSource(ch)
	if src == "" {
		return ch
	}
	sub, err := loader.Load(src)
	if err != nil {
		t.Fatalf("load the Qdrant chart %s: %v", src, err)
	}
	if sub.Name() != "qdrant" {
		t.Fatalf("%s is chart %q, not qdrant", src, sub.Name())
	}
	var deps []*chart.Chart
	for _, d := range ch.Dependencies() {
		if d.Name() != "qdrant" {
			deps = append(deps, d)
		}
	}
	ch.SetDependencies(append(deps, sub)...)
	return ch
}

// qdrantChartSource is the Qdrant chart to add to ch: envQdrantChart, else none when charts/
// already holds it, else the double.
func qdrantChartSource(ch *chart.Chart) string {
	if p := os.Getenv(envQdrantChart); p != "" {
		return p
	}
	for _, d := range ch.Dependencies() {
		if d.Name() == "qdrant" {
			return ""
		}
	}
	return filepath.Join("testdata", "qdrant-chart-double")
}

// qdrantChartUsed says which Qdrant chart the renders use, for the test log.
func qdrantChartUsed(t *testing.T) string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	switch src := qdrantChartSource(ch); {
	case src == "":
		return "the real Qdrant chart that `helm dependency build` put in " + chartDir + "/charts"
	case os.Getenv(envQdrantChart) != "":
		return "the real Qdrant chart at " + src
	}
	return "the Qdrant chart DOUBLE in testdata/qdrant-chart-double (set " + envQdrantChart + " to render the real one)"
}

// renderRelease renders the chart as `helm template` does (Helm's client-only install: values
// and dependencies processed, templates rendered, manifests sorted into install order, hooks
// apart), with Helm's engine rather than its action package, which would bring kubectl,
// registry and storage code into the build for nothing.
func renderRelease(t *testing.T, vals map[string]any) (docs []manifest, notes string, err error) {
	t.Helper()
	ch := loadChart(t)
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return nil, "", fmt.Errorf("dependencies: %w", err)
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, caps.KubeVersion.String()) {
		return nil, "", fmt.Errorf("chart requires kubeVersion %s, incompatible with %s", c, caps.KubeVersion.Version)
	}
	opts := common.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := commonutil.ToRenderValuesWithSchemaValidation(ch, vals, opts, caps, false)
	if err != nil {
		return nil, "", err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, "", err
	}
	// Only the chart's own NOTES.txt is shown (subcharts' only with --render-subchart-notes).
	notes = files[path.Join(ch.Name(), "templates", "NOTES.txt")]
	for k := range files {
		if strings.HasSuffix(k, "NOTES.txt") {
			delete(files, k)
		}
	}
	hooks, sorted, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, "", err
	}
	for _, m := range sorted {
		docs = append(docs, manifest{source: m.Name, content: m.Content})
	}
	for _, h := range hooks {
		docs = append(docs, manifest{source: h.Path, content: h.Manifest, hook: true})
	}
	return docs, notes, nil
}

// manifest is one rendered object's YAML and the template it came from.
type manifest struct {
	source, content string
	hook            bool
}

// rendered is one render of the chart, every object decoded into its k8s.io/api type.
type rendered struct {
	values map[string]any
	notes  string

	objects     []runtime.Object
	deployments map[string]*appsv1.Deployment // by app.kubernetes.io/component
	services    map[string]*corev1.Service    // by name
	configMaps  map[string]*corev1.ConfigMap  // by name
	netpols     []*networkingv1.NetworkPolicy
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	pvcs        []*corev1.PersistentVolumeClaim
	ingresses   []*networkingv1.Ingress
	secrets     []*corev1.Secret
	testPods    []*corev1.Pod // helm test hooks
	certs       []*certificate

	// ours marks the objects this chart renders (not Qdrant's).
	ours map[runtime.Object]bool
}

// render renders vals and decodes every object strictly; any error fails the test.
func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	docs, notes, err := renderRelease(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r := &rendered{
		values:      vals,
		notes:       notes,
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		ours:        map[runtime.Object]bool{},
	}
	for _, d := range docs {
		if strings.TrimSpace(stripComments(d.content)) == "" {
			continue
		}
		r.add(t, d.source, d.content)
	}
	return r
}

func (r *rendered) add(t *testing.T, source, doc string) {
	t.Helper()
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		t.Fatalf("%s: not YAML: %v\n%s", source, err, doc)
	}
	if head.APIVersion == "cert-manager.io/v1" && head.Kind == "Certificate" {
		c, err := decodeCertificate([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v\n%s", source, err, doc)
		}
		r.certs = append(r.certs, c)
		return
	}
	obj, err := decodeStrict([]byte(doc))
	if err != nil {
		t.Fatalf("%s: %v\n%s", source, err, doc)
	}
	r.objects = append(r.objects, obj)
	if strings.HasPrefix(source, "toolmesh/templates/") {
		r.ours[obj] = true
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if r.ours[obj] {
			c := o.Labels["app.kubernetes.io/component"]
			if r.deployments[c] != nil {
				t.Fatalf("two Deployments of component %q", c)
			}
			r.deployments[c] = o
		}
	case *corev1.Service:
		r.services[o.Name] = o
	case *corev1.ConfigMap:
		r.configMaps[o.Name] = o
	case *networkingv1.NetworkPolicy:
		r.netpols = append(r.netpols, o)
	case *policyv1.PodDisruptionBudget:
		r.pdbs = append(r.pdbs, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		r.hpas = append(r.hpas, o)
	case *corev1.PersistentVolumeClaim:
		r.pvcs = append(r.pvcs, o)
	case *networkingv1.Ingress:
		r.ingresses = append(r.ingresses, o)
	case *corev1.Secret:
		r.secrets = append(r.secrets, o)
	case *corev1.Pod:
		r.testPods = append(r.testPods, o)
	}
}

// strict decodes into the registered k8s.io/api types and fails on an unknown or misspelled
// field (matched case-sensitively), a duplicate field or a value of the wrong type.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

func decodeStrict(doc []byte) (runtime.Object, error) {
	obj, gvk, err := strict.Decode(doc, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("strict decode: %w", err)
	}
	if gvk == nil || gvk.Kind == "" {
		return nil, fmt.Errorf("strict decode: no kind")
	}
	return obj, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// certificate is the part of cert-manager's Certificate (cert-manager.io/v1) the chart writes,
// field names as cert-manager.io/v1 documents them. It is
// not in k8s.io/api, so it is decoded strictly into this struct instead.
type certificate struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		DNSNames    []string `json:"dnsNames"`
		Usages      []string `json:"usages"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

func decodeCertificate(doc []byte) (*certificate, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	var c certificate
	strictErrs, err := kjson.UnmarshalStrict(js, &c)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("certificate: strict decode: %v", strictErrs)
	}
	return &c, nil
}

// valuesFile reads testdata/values/NAME.yaml.
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "values", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		t.Fatalf("testdata/values/%s.yaml: %v", name, err)
	}
	return vals
}
