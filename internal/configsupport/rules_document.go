package configsupport

var documentRules = []Rule{}
