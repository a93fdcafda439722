//go:build !linux

package main

import "syscall"

// appProcAttr puts the app in a process group of its own.
func appProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
