package controlplane

// meta is an object's metadata: its name, and namespace unless empty.
func meta(name, namespace string, labels obj) obj {
	m := obj{"name": name}
	if namespace != "" {
		m["namespace"] = namespace
	}

	if labels != nil {
		m["labels"] = labels
	}

	return m
}

// bootstrapToken is the Secret kubelets authenticate with before they have a certificate
// (group system:bootstrappers:nodes besides system:bootstrappers).
func bootstrapToken(id, secret string) obj {
	return obj{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   meta("bootstrap-token-"+id, "kube-system", nil),
		"type":       "bootstrap.kubernetes.io/token",
		"stringData": obj{
			"token-id":                       id,
			"token-secret":                   secret,
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              "system:bootstrappers:nodes",
		},
	}
}

// groupBinding binds a ClusterRole to a group.
func groupBinding(name, role, group string) obj {
	return obj{
		"apiVersion": "rbac.authorization.k8s.io/v1",
		"kind":       "ClusterRoleBinding",
		"metadata":   meta(name, "", nil),
		"roleRef":    obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects":   []obj{{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}},
	}
}

// serviceAccountBinding binds a ClusterRole to a service account of kube-system.
func serviceAccountBinding(name, role, account string) obj {
	return obj{
		"apiVersion": "rbac.authorization.k8s.io/v1",
		"kind":       "ClusterRoleBinding",
		"metadata":   meta(name, "", nil),
		"roleRef":    obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects":   []obj{{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}},
	}
}

func serviceAccount(name string) obj {
	return obj{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, "kube-system", nil)}
}

func clusterRole(name string, rules ...obj) obj {
	return obj{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, "", nil), "rules": rules}
}

func rule(groups, resources, verbs []string) obj {
	return obj{"apiGroups": groups, "resources": resources, "verbs": verbs}
}

// kubeletAPIAccess lets the API server's kubelet client (logs, exec, port-forward) use the
// kubelet API.
func kubeletAPIAccess() obj {
	return obj{
		"apiVersion": "rbac.authorization.k8s.io/v1",
		"kind":       "ClusterRoleBinding",
		"metadata":   meta("system:kube-apiserver-to-kubelet", "", nil),
		"roleRef":    obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
		"subjects":   []obj{{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "apiserver-kubelet-client"}},
	}
}

// hostPathVolume is a pod volume of a host folder or file.
func hostPathVolume(name, path, typ string) obj {
	hp := obj{"path": path}
	if typ != "" {
		hp["type"] = typ
	}

	return obj{"name": name, "hostPath": hp}
}

func envFrom(name, fieldPath string) obj {
	return obj{"name": name, "valueFrom": obj{"fieldRef": obj{"fieldPath": fieldPath}}}
}
