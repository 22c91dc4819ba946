package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process CPU accounting for the throughput benchmarks: they report rates
// per CPU-second of each process involved (the enricher, ingest, the
// Collector, ClickHouse, Kafka), read from Linux's /proc. Elsewhere the
// functions return an error and the benchmarks leave those figures out.

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// SelfCPU is the CPU time (user + system) this process has used so far.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU is the CPU time (user + system, all threads) process pid has
// used so far, in 10 ms steps.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("read cpu time of pid %d: malformed stat %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("read cpu time of pid %d: %d fields in stat", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("read cpu time of pid %d: %w", pid, err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// ListenerPID is the process listening on TCP addr (host:port) on this
// machine, found through /proc/net/tcp{,6} and the processes' socket file
// descriptors (the services started by deploy/dev run as this user).
func ListenerPID(addr string) (int, error) {
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("find listener of %s: %w", addr, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("find listener of %s: %w", addr, err)
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// local_address is HEXIP:HEXPORT; st 0A is LISTEN; inode is field 10.
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			j := strings.LastIndexByte(f[1], ':')
			if p, err := strconv.ParseUint(f[1][j+1:], 16, 16); err == nil && p == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("find listener of %s: no listening socket on port %d", addr, port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, fdDir := range procs {
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err == nil && inodes[target] {
				return strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
			}
		}
	}
	return 0, fmt.Errorf("find listener of %s: no process of this user holds the socket", addr)
}

// CPUMeter reads the CPU time of a set of processes (by name) at once.
type CPUMeter struct {
	names []string
	pids  []int // 0: this process
}

// NewCPUMeter meters this process as "self" and, when found, the process
// listening on each of the named addresses; the others are left out.
func NewCPUMeter(listeners map[string]string) *CPUMeter {
	m := &CPUMeter{names: []string{"self"}, pids: []int{0}}
	for name, addr := range listeners {
		if pid, err := ListenerPID(addr); err == nil {
			m.names, m.pids = append(m.names, name), append(m.pids, pid)
		}
	}
	return m
}

// Add meters process pid under name.
func (m *CPUMeter) Add(name string, pid int) {
	m.names, m.pids = append(m.names, name), append(m.pids, pid)
}

// CPUReading is the CPU time of each metered process at one moment.
type CPUReading map[string]time.Duration

// Read is the CPU time of each metered process now (a process that has
// gone is left out).
func (m *CPUMeter) Read() CPUReading {
	r := make(CPUReading, len(m.names))
	for i, pid := range m.pids {
		if pid == 0 {
			r[m.names[i]] = SelfCPU()
			continue
		}
		if d, err := ProcessCPU(pid); err == nil {
			r[m.names[i]] = d
		}
	}
	return r
}

// Since is the CPU time each process used between r0 and r.
func (r CPUReading) Since(r0 CPUReading) CPUReading {
	d := make(CPUReading, len(r))
	for k, v := range r {
		if v0, ok := r0[k]; ok {
			d[k] = v - v0
		}
	}
	return d
}
