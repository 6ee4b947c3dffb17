package configsupport

var kubernetesRules = []Rule{}
