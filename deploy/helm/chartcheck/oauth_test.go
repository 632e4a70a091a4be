package chartcheck

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestOAuthSecret: with executor.oauth.enabled the executors keep OAuth tokens in one Secret the
// chart makes, and only they get a service account token, allowed to get and patch that one
// Secret and nothing else; without it no pod has a token.
func TestOAuthSecret(t *testing.T) {
	off := render(t, map[string]any{})
	for c, d := range off.deployments {
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("%s: automountServiceAccountToken %v without executor.oauth; want false", c, a)
		}
	}
	r := render(t, map[string]any{"executor": map[string]any{"oauth": map[string]any{"enabled": true}}})
	const name = releaseName + "-toolmesh-oauth-tokens"
	for c, d := range r.deployments {
		spec := d.Spec.Template.Spec
		mounted := spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken
		if mounted != (c == "executor") {
			t.Errorf("%s: automountServiceAccountToken %v; want it on the executor only", c, mounted)
		}
		if c == "executor" && !slices.Contains(spec.Containers[0].Args, "--executor.oauth-secret="+name) {
			t.Errorf("executor args %v; want --executor.oauth-secret=%s", spec.Containers[0].Args, name)
		}
	}
	found := false
	for _, s := range r.secrets {
		if s.Name == name {
			found = true
			if len(s.Data) > 0 || s.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Errorf("secret %s: data %v, annotations %v; want no data and resource-policy keep", name, s.Data, s.Annotations)
			}
		}
	}
	if !found {
		t.Errorf("no Secret %s", name)
	}
	var roles []*rbacv1.Role
	for _, o := range r.objects {
		if role, ok := o.(*rbacv1.Role); ok {
			roles = append(roles, role)
		}
	}
	if len(roles) != 1 || len(roles[0].Rules) != 1 {
		t.Fatalf("roles %v; want one with one rule", roles)
	}
	rule := roles[0].Rules[0]
	if !slices.Equal(rule.Resources, []string{"secrets"}) || !slices.Equal(rule.ResourceNames, []string{name}) || !slices.Equal(rule.Verbs, []string{"get", "patch"}) {
		t.Errorf("rule %+v; want get and patch of secret %s only", rule, name)
	}
}
