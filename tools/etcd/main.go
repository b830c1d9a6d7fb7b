// Command etcd is the etcd server, built from its Go module so the test
// harness and the dev cluster need no downloaded release archive.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
