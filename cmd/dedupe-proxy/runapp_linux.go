package main

import "syscall"

// appProcAttr puts the app in a process group of its own, and has the
// kernel send it SIGTERM should the proxy die without stopping it (a
// SIGKILL), so no app is left listening.
func appProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
