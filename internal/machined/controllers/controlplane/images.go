package controlplane

import (
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/talos-go/talos/internal/images"
)

// machineryCoreDNSImage is the CoreDNS image the machinery module names when the config sets
// none; it stands for "the default", which here is the one built into the node image
// (images.CoreDNS).
const machineryCoreDNSImage = constants.CoreDNSImage + ":" + constants.DefaultCoreDNSVersion

// coreDNSImage is the CoreDNS image to run for the config's cluster.coreDNS.image.
func coreDNSImage(configured string) string {
	if configured == "" || configured == machineryCoreDNSImage {
		return images.CoreDNS
	}

	return configured
}
