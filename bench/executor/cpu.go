package main

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) this process has used so far. Everything in a
// scenario runs in this process, so its CPU per call is the full cost of a call on every
// side, and, unlike calls/s, it barely moves when other processes load the machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
