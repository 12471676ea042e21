// Command etcd is the etcd server at the version that the pinned kube-apiserver is built and
// tested against (the go.etcd.io/etcd/server/v3 version in this module's go.sum). It only hands
// the command line to etcd's own entry point, so every etcd flag works as documented.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
