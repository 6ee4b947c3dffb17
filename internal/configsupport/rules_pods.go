package configsupport

// The kubelet settings of the machine: static pods and seccomp profiles. Both are honoured on
// every node: a process node runs no kubelet, so there they do nothing, as kubelet's other
// fields.
var podRules = []Rule{
	{Path: "machine.pods", Test: "internal/e2e/container.TestConfigStaticPodFollowsConfig"},
	{Path: "machine.seccompProfiles", Test: "internal/e2e/container.TestSeccompProfileFromConfig"},
}
