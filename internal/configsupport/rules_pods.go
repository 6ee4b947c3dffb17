package configsupport

// The kubelet settings of the machine: static pods and seccomp profiles.
var podRules = []Rule{
	{
		Path: "machine.pods", Refused: "static pods from the config are not written for the kubelet yet",
		Fix: "remove them and deploy the pods through the Kubernetes API (or cluster.inlineManifests)",
	}, {
		Path: "machine.seccompProfiles", Refused: "seccomp profiles from the config are not written for the kubelet yet",
		Fix: "remove them, or put the profile in the pod (localhostProfile needs the file on the node)",
	}}
