// Package chartcheck checks the Helm chart in deploy/helm/toolmesh without a cluster: Helm's
// own linter and renderer (Helm's Go module as a library), every rendered object decoded
// strictly into its k8s.io/api type, and the properties users rely on (probes, limits,
// secrets by reference, Services that select the right pods, NetworkPolicies that admit
// exactly the intended callers). It also keeps the chart's values reference in
// docs/operations/kubernetes.md in step with values.yaml.
//
// It is a module of its own so that Helm's and Kubernetes' dependencies stay out of the main
// module's go.mod; scripts/chartcheck runs it (and scripts/test runs that).
package chartcheck
