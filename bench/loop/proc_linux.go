package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// selfCPU is the CPU time (user + system) this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// userHZ is the unit of /proc/PID/stat's times: USER_HZ, which Linux fixes at 100 for
// user space whatever the kernel's own tick rate.
const userHZ = 100

// processCPU is the CPU time (user + system) of a running process, from /proc/PID/stat
// (fields 14 and 15, in USER_HZ ticks: 10 ms resolution, fine over seconds).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// signalProfile starts (SIGUSR1) or stops (SIGUSR2) a child's CPU profile (bench/loop/profiled).
func signalProfile(p *os.Process, start bool) error {
	if start {
		return p.Signal(syscall.SIGUSR1)
	}
	return p.Signal(syscall.SIGUSR2)
}

// ctxSwitches is how many times the threads of process pid (0: this one) have been switched
// out so far, voluntarily (waiting: a parked Go runtime, a read with nothing to read) or not,
// summed over /proc/PID/task/*/status. Threads that have exited are not counted.
func ctxSwitches(pid int) (int64, error) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n, nil
}

// childAttr makes the kernel kill a child when this process dies, even by SIGKILL, so no
// mesh process outlives a crashed or killed bench. (The signal follows the OS thread that
// started the child; Go only ends threads whose goroutine locked them, which nothing here does.)
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
