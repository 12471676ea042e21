// Command pause is what every pod sandbox runs as PID 1: it holds the pod's namespaces open, reaps
// the zombies of processes that end up re-parented to it, and exits 0 on SIGTERM or SIGINT (how the
// runtime stops a sandbox). It stands in for registry.k8s.io/pause, which cannot be pulled here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for received := range signals {
		if received == syscall.SIGCHLD {
			reapExitedChildren()
			continue
		}
		os.Exit(0)
	}
}

// reapExitedChildren collects every child that has exited, since one SIGCHLD may stand for several.
func reapExitedChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
