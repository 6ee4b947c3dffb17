package services

import (
	"os"
	"path/filepath"

	"github.com/talos-go/talos/internal/machined/runtime"
)

// program is the command line that starts the node program name (apid, trustd): its own
// binary when the node image carries one next to machined's, else the multi-call binary with
// name as its first argument (a link to the multi-call binary named
// name works too: it picks the program by argv[0]). The own binary loads only that program's packages, so the
// process's memory holds none of machined's (Kubernetes client, controllers).
func program(r *runtime.Runtime, name string) []string {
	own := filepath.Join(filepath.Dir(r.Binary), name)
	if st, err := os.Stat(own); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return []string{own}
	}

	return []string{r.Binary, name}
}
