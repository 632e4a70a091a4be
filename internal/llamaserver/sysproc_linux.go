package llamaserver

import "syscall"

// sysProcAttr puts the child in its own process group and has the kernel kill it when the
// thread that started it ends, so no llama-server outlives a toolmesh that was killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
