package chartcheck

import (
	"maps"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// pod is a caller or a callee as NetworkPolicies see it: its labels and its namespace's.
type pod struct {
	name      string
	labels    map[string]string
	nsLabels  map[string]string
	namespace string
}

// admits evaluates the rendered NetworkPolicies as Kubernetes does for ingress: a pod that no
// policy selects takes everything; a selected pod takes a connection only if some ingress rule
// of some policy selecting it allows that port from that peer.
func admits(t *testing.T, pols []*networkingv1.NetworkPolicy, from, to pod, port int32) bool {
	t.Helper()
	var selected bool
	for _, p := range pols {
		if p.Namespace != "" && p.Namespace != to.namespace {
			continue
		}
		if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && len(p.Spec.PolicyTypes) != 0 {
			continue
		}
		if !matches(t, &p.Spec.PodSelector, to.labels) {
			continue
		}
		selected = true
		for _, rule := range p.Spec.Ingress {
			if portAllowed(rule.Ports, port) && peerAllowed(t, rule.From, from, to.namespace) {
				return true
			}
		}
	}
	return !selected
}

func portAllowed(ports []networkingv1.NetworkPolicyPort, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != "TCP" {
			continue
		}
		if p.Port == nil {
			return true
		}
		// The chart writes numbers; a named port would need the pod's ports to resolve.
		if p.Port.IntVal == port && p.EndPort == nil {
			return true
		}
		if p.EndPort != nil && port >= p.Port.IntVal && port <= *p.EndPort {
			return true
		}
	}
	return false
}

func peerAllowed(t *testing.T, peers []networkingv1.NetworkPolicyPeer, from pod, policyNS string) bool {
	t.Helper()
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			// Pod-to-pod traffic is not judged by ipBlock here; the chart writes none.
			t.Errorf("ipBlock peer %v: not evaluated by this check", p.IPBlock)
			continue
		}
		nsOK := from.namespace == policyNS
		if p.NamespaceSelector != nil {
			nsOK = matches(t, p.NamespaceSelector, from.nsLabels)
		}
		podOK := true
		if p.PodSelector != nil {
			podOK = matches(t, p.PodSelector, from.labels)
		}
		if nsOK && podOK {
			return true
		}
	}
	return false
}

func matches(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("label selector %v: %v", sel, err)
	}
	return s.Matches(labels.Set(l))
}

// checkNetworkPolicies: the callers each port admits, computed from the rendered policies for
// every pod of the release (and for a stranger in the same namespace and one in another), are
// exactly the intended ones: the executor the api and the retriever; the retriever and
// inference the api; llama-server inference; the api anyone (or networkPolicy.apiFrom).
func checkNetworkPolicies(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.netpols) == 0 {
		t.Fatal("no NetworkPolicy")
	}
	nsLabels := map[string]string{"kubernetes.io/metadata.name": namespace}
	pods := map[string]pod{}
	for c, d := range r.deployments {
		pods[c] = pod{name: c, labels: d.Spec.Template.Labels, namespace: namespace, nsLabels: nsLabels}
	}
	pods["stranger"] = pod{name: "stranger", labels: map[string]string{"app": "other"}, namespace: namespace, nsLabels: nsLabels}
	pods["other-namespace"] = pod{name: "other-namespace", labels: r.deployments["api"].Spec.Template.Labels, namespace: "elsewhere",
		nsLabels: map[string]string{"kubernetes.io/metadata.name": "elsewhere"}}
	pods["ingress-controller"] = pod{name: "ingress-controller", labels: map[string]string{"app": "ingress"}, namespace: "ingress-nginx",
		nsLabels: map[string]string{"kubernetes.io/metadata.name": "ingress-nginx"}}

	pods["prometheus"] = pod{name: "prometheus", labels: map[string]string{"app": "prometheus"}, namespace: "monitoring",
		nsLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}

	// Who must be admitted on each component's serving port; everyone else must not be.
	apiCallers := slices.Sorted(maps.Keys(pods))
	if apiFrom, _ := lookup(r.values, "networkPolicy", "apiFrom").([]any); len(apiFrom) > 0 {
		// The cases that restrict the api admit the ingress-nginx namespace only.
		apiCallers = []string{"ingress-controller"}
	}
	var scrapers []string
	if from, _ := lookup(r.values, "networkPolicy", "metricsFrom").([]any); len(from) > 0 {
		// The cases that open metrics open them to the monitoring namespace only.
		scrapers = []string{"prometheus"}
	}
	want := map[string]struct {
		port    int32
		callers []string
	}{
		"executor":     {7704, []string{"api", "retriever"}},
		"retriever":    {7702, []string{"api"}},
		"inference":    {7703, []string{"api"}},
		"llama-server": {8080, []string{"inference"}},
		"api":          {7700, apiCallers},
	}
	for target, w := range want {
		to, ok := pods[target]
		if !ok {
			continue // llama-server is not always rendered
		}
		var got []string
		for _, name := range slices.Sorted(maps.Keys(pods)) {
			from := pods[name]
			if name == target {
				continue // a pod talking to itself goes over loopback
			}
			if admits(t, r.netpols, from, to, w.port) {
				got = append(got, name)
			}
		}
		wantCallers := slices.DeleteFunc(slices.Clone(w.callers), func(s string) bool { _, ok := pods[s]; return !ok || s == target })
		slices.Sort(wantCallers)
		if !slices.Equal(got, wantCallers) {
			t.Errorf("%s:%d admits %v, want %v", target, w.port, got, wantCallers)
		}
		// No other port of the pod is open to a stranger.
		for _, port := range []int32{7700, 7701, 7702, 7703, 7704, 8080, 9464} {
			if port == w.port || (target == "api" && port == 7701) {
				continue
			}
			if admits(t, r.netpols, pods["stranger"], to, port) {
				t.Errorf("%s: port %d admits a stranger pod", target, port)
			}
		}
		// Metrics: only networkPolicy.metricsFrom, and never llama-server's (its metrics share
		// the port of its completions).
		if target == "llama-server" || w.port == 7700 && len(apiCallers) == len(pods) {
			continue
		}
		var gotScrapers []string
		for _, name := range slices.Sorted(maps.Keys(pods)) {
			if admits(t, r.netpols, pods[name], to, 9464) {
				gotScrapers = append(gotScrapers, name)
			}
		}
		if !slices.Equal(gotScrapers, scrapers) {
			t.Errorf("%s:9464 (metrics) admits %v, want %v", target, gotScrapers, scrapers)
		}
	}
}

// TestNetworkPolicyEvaluator checks the evaluator itself on hand-written policies, so that a
// bug in it cannot make the chart's check pass.
func TestNetworkPolicyEvaluator(t *testing.T) {
	a := pod{name: "a", labels: map[string]string{"c": "a"}, namespace: "n", nsLabels: map[string]string{"ns": "n"}}
	b := pod{name: "b", labels: map[string]string{"c": "b"}, namespace: "n", nsLabels: map[string]string{"ns": "n"}}
	x := pod{name: "x", labels: map[string]string{"c": "a"}, namespace: "m", nsLabels: map[string]string{"ns": "m"}}
	tcp := func(p int32) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Port: ptrIntOrString(p)}}
	}
	onlyA := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"c": "b"}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			Ports: tcp(80),
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"c": "a"}}}},
		}},
	}}
	denyAll := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"c": "b"}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
	}}
	fromNS := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"c": "b"}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "m"}}}},
		}},
	}}
	for _, c := range []struct {
		name     string
		pols     []*networkingv1.NetworkPolicy
		from, to pod
		port     int32
		want     bool
	}{
		{"no policy admits all", nil, a, b, 80, true},
		{"pod selector, right port", []*networkingv1.NetworkPolicy{onlyA}, a, b, 80, true},
		{"pod selector, other port", []*networkingv1.NetworkPolicy{onlyA}, a, b, 81, false},
		{"pod selector, other namespace", []*networkingv1.NetworkPolicy{onlyA}, x, b, 80, false},
		{"pod selector, unselected target", []*networkingv1.NetworkPolicy{onlyA}, b, a, 80, true},
		{"deny all", []*networkingv1.NetworkPolicy{denyAll}, a, b, 80, false},
		{"policies add up", []*networkingv1.NetworkPolicy{denyAll, onlyA}, a, b, 80, true},
		{"namespace selector, any port", []*networkingv1.NetworkPolicy{fromNS}, x, b, 9999, true},
		{"namespace selector, own namespace", []*networkingv1.NetworkPolicy{fromNS}, a, b, 80, false},
	} {
		if got := admits(t, c.pols, c.from, c.to, c.port); got != c.want {
			t.Errorf("%s: admits = %v, want %v", c.name, got, c.want)
		}
	}
}

func ptrIntOrString(p int32) *intstr.IntOrString {
	v := intstr.FromInt32(p)
	return &v
}
