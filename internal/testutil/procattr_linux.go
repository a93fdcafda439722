package testutil

import "syscall"

// Pdeathsig kills the server if the test binary dies without running its
// cleanups (a -timeout panic, a SIGKILL), instead of leaving it listening.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
