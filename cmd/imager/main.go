// Command imager builds and verifies signed node images (see internal/imager).
package main

import "github.com/talos-go/talos/internal/imager"

func main() { imager.CommandMain() }
