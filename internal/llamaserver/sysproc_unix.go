//go:build unix && !linux

package llamaserver

import "syscall"

// sysProcAttr puts the child in its own process group; only Linux can also tie its life to
// ours (see sysproc_linux.go).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
