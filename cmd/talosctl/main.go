// Command talosctl is the client of the Talos machine API.
package main

import "github.com/talos-go/talos/internal/talosctl"

func main() {
	talosctl.Main()
}
