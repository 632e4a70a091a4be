//go:build unix

package llamaserver

import "syscall"

// signalGroup sends SIGTERM (or SIGKILL) to the process group the child leads.
func signalGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig)
}
