// Command etcd is a thin wrapper around go.etcd.io/etcd/server/v3/etcdmain,
// equivalent to the upstream etcd binary's main. It exists so the test harness
// (../kube.sh) can build a real etcd from the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
