package configsupport

// Talos API access from Kubernetes pods.
var apiAccessRules = []Rule{
	{
		// A control plane's machined keeps a Secret with a talosconfig for each talos.dev
		// ServiceAccount whose namespace and roles the config allows. A process node runs no
		// Kubernetes, so there is nothing to serve it to.
		Path: "machine.features.kubernetesTalosAPIAccess", Test: "internal/e2e/container.TestKubernetesTalosAPIAccess", On: []Node{Process},
		Refused: "a process node runs no Kubernetes, so no pod can be given Talos API access",
		Fix:     "remove it, or run the node with the container provisioner or on metal",
	},
}
