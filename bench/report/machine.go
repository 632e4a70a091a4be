package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// describe reads what the figures depend on: CPU, memory, kernel, OS, Go.
func describe(ctx context.Context) machine {
	m := machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: strconv.Itoa(runtime.GOMAXPROCS(0))}
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		m.GOMAXPROCS += " (GOMAXPROCS=" + v + " in the environment)"
	} else {
		m.GOMAXPROCS += " (Go's default; the programs inherit the same environment)"
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				m.CPUs++
			case "model name":
				if m.CPU == "" {
					m.CPU = strings.TrimSpace(v)
				}
			}
		}
		f.Close()
	}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH + " (model unknown)"
	}
	if info, err := os.ReadFile("/proc/meminfo"); err == nil {
		fields := map[string]float64{}
		for line := range strings.SplitSeq(string(info), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseFloat(f[0], 64)
				fields[k] = n * 1024 // kB
			}
		}
		gib := func(b float64) string { return fmt.Sprintf("%.1f GiB", b/(1<<30)) }
		m.Memory = gib(fields["MemTotal"]) + " total, " + gib(fields["MemAvailable"]) + " available at the start"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	} else {
		m.Go = runtime.Version() + " (the report's own; `go version` failed)"
	}
	return m
}

// commit is HEAD's short hash, with "+dirty" when anything but the report itself differs from it
// (uncommitted or untracked files end up in the programs the report builds).
func commit(ctx context.Context, exclude string) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (git rev-parse failed)"
	}
	sha := strings.TrimSpace(string(out))
	args := []string{"status", "--porcelain", "--", "."}
	if exclude != "" {
		args = append(args, ":(exclude)"+exclude)
	}
	st, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		return sha + "+unknown"
	}
	if len(strings.TrimSpace(string(st))) > 0 {
		return sha + "+dirty"
	}
	return sha
}
