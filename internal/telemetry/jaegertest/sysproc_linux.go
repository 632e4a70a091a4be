package jaegertest

import "syscall"

// sysProcAttr has the kernel kill Jaeger when the test binary dies without running its
// cleanups (a -timeout panic, a crash), so no orphaned Jaeger outlives a CI run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
