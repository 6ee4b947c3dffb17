package configsupport

var storageRules = []Rule{}
