package configsupport

var machineRules = []Rule{}
