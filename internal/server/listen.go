package server

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// unixScheme starts a listen address that is a Unix socket ("unix:/run/x/executor.sock"), the
// form grpc-go dials too.
const unixScheme = "unix:"

// listen binds addr: host:port over TCP, or unix:PATH, a socket only its owner may connect to.
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, unixScheme)
	if !ok {
		return net.Listen("tcp", addr)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Connecting takes write permission on the socket: the owner's alone. The umask decides the
	// mode the file is created with, so set it after (the caller's directory, 0700 in the app,
	// keeps others out in between).
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return lis, nil
}

// addrOf names what lis listens on as a dial target: host:port, or unix:PATH.
func addrOf(lis net.Listener) string {
	if a, ok := lis.Addr().(*net.UnixAddr); ok {
		return unixScheme + a.Name
	}
	return lis.Addr().String()
}

// Loopback reports whether a listen address (host:port) takes connections from this host only:
// a loopback IP or "localhost". An empty host, an unspecified IP or a name is every interface
// or may be any.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
