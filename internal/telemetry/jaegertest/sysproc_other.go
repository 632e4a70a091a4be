//go:build !linux

package jaegertest

import "syscall"

// sysProcAttr: only Linux can tie the child's life to ours (see sysproc_linux.go).
func sysProcAttr() *syscall.SysProcAttr { return nil }
