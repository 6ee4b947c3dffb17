package configsupport

var networkRules = []Rule{}
