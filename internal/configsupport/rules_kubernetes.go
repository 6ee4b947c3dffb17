package configsupport

// kubernetesRules cover the cluster section and the machine's Kubernetes settings (kubelet, the
// control plane's components, KubePrism, apid's access features). machine.nodeLabels,
// nodeTaints, nodeAnnotations, machine.pods and cluster.etcd.advertisedSubnets/listenSubnets
// are ruled elsewhere.
var kubernetesRules = []Rule{
	// The control plane's components: their config resources, static pods and files.
	{Path: "machine.controlPlane.controllerManager.disabled", Test: "internal/machined/controllers/k8s.TestStaticPodsDisabled"},
	{Path: "machine.controlPlane.scheduler.disabled", Test: "internal/machined/controllers/k8s.TestStaticPodsDisabled"},
	{Path: "cluster.controlPlane.endpoint", Test: "internal/machined/controllers/controlplane.TestConfigs"},
	{Path: "cluster.controlPlane.localAPIServerPort", Test: "internal/machined/controllers/k8s.TestKubePrism"},
	{Path: "cluster.clusterName", Test: "internal/e2e/container.TestKubeconfigMerged"},
	{Path: "cluster.id", Test: "internal/machined/controllers/kubespan.TestConfigAndIdentity"},
	// The discovery service's affiliates are encrypted with it: a node with another key sees none.
	{Path: "cluster.secret", Test: "internal/machined/controllers/cluster.TestDiscoveryService"},
	{Path: "cluster.apiServer.image", Test: "internal/machined/controllers/k8s.TestStaticPods"},
	{Path: "cluster.apiServer.extraArgs", Test: "internal/machined/controllers/k8s.TestStaticPods"},
	{Path: "cluster.apiServer.extraVolumes", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.apiServer.env", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.apiServer.resources", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.apiServer.certSANs", Test: "internal/machined/controllers/secrets.TestKubernetesSecrets"},
	{Path: "cluster.apiServer.disablePodSecurityPolicy", NoEffect: "PodSecurityPolicy was removed in Kubernetes 1.25; the API server this node runs has none to disable"},
	{Path: "cluster.apiServer.admissionControl", Test: "internal/machined/controllers/k8s.TestStaticPods"},
	{Path: "cluster.apiServer.auditPolicy", Test: "internal/machined/controllers/k8s.TestStaticPods"},
	{Path: "cluster.apiServer.authorizationConfig", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.controllerManager", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.controllerManager.extraArgs", Test: "internal/machined/controllers/controlplane.TestConfigs"},
	{Path: "cluster.scheduler", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.scheduler.image", Test: "internal/e2e/container.TestUpgradeK8s"},
	{Path: "cluster.scheduler.extraArgs", Test: "internal/machined/controllers/controlplane.TestConfigs"},
	{Path: "cluster.scheduler.extraVolumes", Test: "internal/machined/controllers/k8s.TestStaticPods"},

	// Bootstrap manifests: CNI, kube-proxy, CoreDNS, the user's manifests.
	{Path: "cluster.network.cni.name", Test: "internal/machined/controllers/controlplane.TestManifestsDisabled"},
	{Path: "cluster.network.cni.urls", Test: "internal/machined/controllers/controlplane.TestExtraManifests"},
	{Path: "cluster.network.cni.flannel.extraArgs", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.network.dnsDomain", Test: "internal/machined/controllers/controlplane.TestConfigs"},
	{Path: "cluster.network.podSubnets", Test: "internal/machined/controllers/controlplane.TestManifestsDefault"},
	{Path: "cluster.network.serviceSubnets", Test: "internal/machined/controllers/controlplane.TestConfigs"},
	{Path: "cluster.proxy.disabled", Test: "internal/machined/controllers/controlplane.TestManifestsDisabled"},
	{Path: "cluster.proxy.image", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.proxy.mode", Test: "internal/machined/controllers/controlplane.TestConfigs"},
	{Path: "cluster.proxy.extraArgs", Test: "internal/machined/controllers/controlplane.TestConfigs"},
	{Path: "cluster.coreDNS.disabled", Test: "internal/machined/controllers/controlplane.TestManifestsDisabled"},
	{Path: "cluster.coreDNS.image", Test: "internal/configsupport.TestControlPlaneFieldsTakeEffect"},
	{Path: "cluster.extraManifests", Test: "internal/machined/controllers/controlplane.TestExtraManifests"},
	{Path: "cluster.extraManifestHeaders", Test: "internal/machined/controllers/controlplane.TestExtraManifests"},
	{Path: "cluster.inlineManifests", Test: "internal/machined/controllers/controlplane.TestManifestsDisabled"},
	{Path: "cluster.externalCloudProvider", Refused: "no cloud controller manager is built into this node image", Fix: "remove cluster.externalCloudProvider"},
	{Path: "cluster.allowSchedulingOnControlPlanes", Test: "internal/machined/controllers/k8s.TestNodeSpecsOfAControlPlane"},
	{Path: "cluster.allowSchedulingOnMasters", Test: "internal/machined/controllers/k8s.TestNodeSpecsOfAControlPlane"},

	// Secrets and CAs.
	{Path: "cluster.token", Test: "internal/machined/controllers/secrets.TestKubernetesSecrets"},
	{Path: "cluster.ca", Test: "internal/machined/controllers/secrets.TestKubernetesSecrets"},
	{Path: "cluster.aggregatorCA", Test: "internal/machined/controllers/secrets.TestKubernetesSecrets"},
	{Path: "cluster.serviceAccount", Test: "internal/machined/controllers/secrets.TestKubernetesSecrets"},
	{Path: "cluster.secretboxEncryptionSecret", Test: "internal/machined/controllers/secrets.TestKubernetesSecrets"},
	{Path: "cluster.aescbcEncryptionSecret", Test: "internal/machined/controllers/secrets.TestKubernetesSecretsConfigFields"},
	{Path: "cluster.acceptedCAs", Test: "internal/machined/controllers/secrets.TestKubernetesSecretsConfigFields"},
	{Path: "cluster.adminKubeconfig.certLifetime", Test: "internal/machined/controllers/secrets.TestKubernetesSecretsConfigFields"},

	// etcd.
	{Path: "cluster.etcd.ca", Test: "internal/machined/controllers/secrets.TestKubernetesSecrets"},
	{Path: "cluster.etcd.image", Refused: "etcd runs from the node image's own etcd binary, not a container image", Fix: "remove it; the etcd version is the node image's"},
	{Path: "cluster.etcd.extraArgs", Test: "internal/machined/services.TestEtcdExtraArgsFromConfig"},
	// The deprecated subnet is advertisedSubnets' single-entry form (machinery returns it there).
	{Path: "cluster.etcd.subnet", Test: "internal/machined/services.TestEtcdSubnetFromConfig"},

	// Discovery: upstream's discovery service protocol, to the endpoint configured (talosctl
	// cluster create runs one on the host); the Kubernetes registry is the Nodes' annotations,
	// as upstream's.
	{Path: "cluster.discovery.enabled", Test: "internal/machined/controllers/cluster.TestMembersDiscoveryDisabled"},
	{Path: "cluster.discovery.registries.kubernetes.disabled", Test: "internal/machined/controllers/cluster/kubernetes.TestKubernetesRegistry"},
	{Path: "cluster.discovery.registries.service.disabled", Test: "internal/machined/controllers/cluster.TestMembersDiscoveryDisabled"},
	{Path: "cluster.discovery.registries.service.endpoint", Test: "internal/machined/controllers/cluster.TestDiscoveryService"},

	// kubelet.
	{Path: "machine.kubelet.image", Test: "internal/configsupport.TestKubeletFieldsTakeEffect"},
	{Path: "machine.kubelet.clusterDNS", Test: "internal/configsupport.TestKubeletFieldsTakeEffect"},
	{Path: "machine.kubelet.extraArgs", Test: "internal/machined/controllers/k8s.TestKubelet"},
	{Path: "machine.kubelet.extraMounts", Test: "internal/machined/controllers/k8s.TestKubelet"},
	{Path: "machine.kubelet.extraMounts[].uidMappings", Test: "internal/machined/services.TestKubeletExtraMountIDMappings"},
	{Path: "machine.kubelet.extraMounts[].gidMappings", Test: "internal/machined/services.TestKubeletExtraMountIDMappings"},
	{Path: "machine.kubelet.extraConfig", Test: "internal/machined/controllers/k8s.TestKubelet"},
	{Path: "machine.kubelet.credentialProviderConfig", Refused: "no credential provider plugins are in this node image", Fix: "remove it: images come from the node image's cache or an anonymous registry"},
	{Path: "machine.kubelet.defaultRuntimeSeccompProfileEnabled", Test: "internal/configsupport.TestKubeletFieldsTakeEffect"},
	{Path: "machine.kubelet.registerWithFQDN", Test: "internal/configsupport.TestKubeletFieldsTakeEffect"},
	{Path: "machine.kubelet.nodeIP.validSubnets", Test: "internal/machined/controllers/k8s.TestKubelet"},
	{Path: "machine.kubelet.skipNodeRegistration", Test: "internal/configsupport.TestKubeletFieldsTakeEffect"},
	{Path: "machine.kubelet.disableManifestsDirectory", Test: "internal/configsupport.TestKubeletFieldsTakeEffect"},

	// Features.
	{Path: "machine.features.kubePrism", Test: "internal/machined/controllers/k8s.TestKubePrism"},
	{Path: "machine.features.rbac", Test: "internal/apid.TestEveryMethodCertificatesAndRoles"},
	{Path: "machine.features.apidCheckExtKeyUsage", Test: "internal/apid.TestEveryMethodCertificatesAndRoles"},
	{Path: "machine.features.stableHostname", Test: "internal/machined/controllers/network.TestHostnameSpecKeepsItsSeed"},
}
