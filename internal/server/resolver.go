package server

import (
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc/resolver"
)

// addressList is the "ipv4:" and "ipv6:" target schemes of gRPC's naming document, which
// grpc-go does not ship: "ipv4:10.0.0.1:7704,10.0.0.2:7704" names a fixed set of replicas that
// round_robin spreads calls over, where no DNS name lists them all (a headless Service does
// that in Kubernetes, with dns:///NAME).
type addressList struct{ scheme string }

func (b addressList) Scheme() string { return b.scheme }

func (b addressList) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	// "ipv4:a:1,b:2" parses as a URL with opaque "a:1,b:2"; "ipv4:///a:1,b:2" with a path.
	list := t.URL.Opaque
	if list == "" {
		list = strings.TrimPrefix(t.URL.Path, "/")
	}
	hosts, err := addressesOf(b.scheme, list)
	if err != nil {
		return nil, fmt.Errorf("%s target %q: %w", b.scheme, t.URL.String(), err)
	}
	addrs := make([]resolver.Address, len(hosts))
	for i, a := range hosts {
		addrs[i] = resolver.Address{Addr: a}
	}
	if err := cc.UpdateState(resolver.State{Addresses: addrs}); err != nil {
		return nil, err
	}
	return addressList{}, nil
}

func (addressList) ResolveNow(resolver.ResolveNowOptions) {}
func (addressList) Close()                                {}

// CheckTarget says what is wrong with target as an address to dial a toolmesh service at:
// host:port, or a gRPC target with a scheme (dns:///NAME:PORT for every address a name has,
// ipv4:A:P,B:P or ipv6:[A]:P,[B]:P for a fixed list of replicas, unix:PATH).
func CheckTarget(target string) error {
	scheme, rest, found := strings.Cut(target, ":")
	switch {
	case found && (scheme == "ipv4" || scheme == "ipv6"):
		_, err := addressesOf(scheme, strings.TrimPrefix(rest, "///"))
		return err
	case found && (scheme == "dns" || scheme == "unix" || scheme == "passthrough"):
		if rest == "" || rest == "///" {
			return fmt.Errorf("%s target names nothing", scheme)
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return fmt.Errorf("not host:port, dns:///NAME:PORT or ipv4:ADDR,ADDR: %w", err)
	}
	return nil
}

// Replicated reports whether target can name more than one replica: an ipv4: or ipv6: list of
// several addresses, or a dns: name (it may resolve to several addresses, now or later).
func Replicated(target string) bool {
	scheme, rest, found := strings.Cut(target, ":")
	switch {
	case found && (scheme == "ipv4" || scheme == "ipv6"):
		hosts, err := addressesOf(scheme, strings.TrimPrefix(rest, "///"))
		return err == nil && len(hosts) > 1
	case found && scheme == "dns":
		return true
	}
	return false
}

// addressesOf splits the comma-separated list of an ipv4: or ipv6: target and checks each is
// an address of that family with a port.
func addressesOf(scheme, list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		ip := net.ParseIP(host)
		if err != nil || port == "" || ip == nil || (scheme == "ipv4") != (ip.To4() != nil) {
			return nil, fmt.Errorf("%q is not an %s address with a port", a, scheme)
		}
		out = append(out, a)
	}
	return out, nil
}
